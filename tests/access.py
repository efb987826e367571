"""What the route-walking permission tests need to know about each model: how to make one in a project.

A new model behind an API endpoint or a project page must get a maker here, or
tests/projects/test_access_matrix.py fails and says so: every endpoint is covered.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from apps.accounts.models import ApiToken, Notification
from apps.accounts.services import create_token, notify
from apps.alerts.models import AlertEvent, AlertRule
from apps.alerts.models import Channel as AlertChannel
from apps.alerts.models import Delivery as AlertDelivery
from apps.appstore.models import App, Installation
from apps.appstore.services import add_version, install
from apps.audit.models import AuditEntry
from apps.datasets.models import Dataset, DatasetVersion, UploadFile, UploadSession
from apps.hpo.models import Study, Trial
from apps.jobs.models import Image, JobTemplate, Pipeline, PipelineRun, Schedule, TaskRun
from apps.knowledge.models import Document as KnowledgeDocument
from apps.knowledge.models import KnowledgeBase
from apps.labeling.models import Annotation, LabelingExport, LabelingProject, LabelingTask, MLBackend
from apps.monitoring.models import DriftMonitor, DriftReport
from apps.notebooks.models import Notebook
from apps.projects.models import Membership, Project, ProjectSecret, Quota, Role
from apps.runtime.models import Cluster, ProjectCluster
from apps.serving.models import InferenceService, Revision
from tests import factories as dataset_factories
from tests import factories as tracking_factories
from tests.alerts.factories import channel as make_alert_channel
from tests.alerts.factories import rule as make_alert_rule
from tests.appstore.factories import tiny_bundle
from tests.factories import ProjectFactory, UserFactory, add_member, pipeline, python_template
from tests.hpo.factories import study as make_study
from tests.runtime.factories import ClusterFactory, bind


def make_run(project: Project, owner: Any) -> PipelineRun:
    number = PipelineRun.objects.filter(project=project).count() + 1
    spec = {"nodes": [{"name": "a", "template": "py@1", "depends_on": []}]}
    return PipelineRun.objects.create(project=project, pipeline_name="pipe", number=number, created_by=owner, spec=spec)


# model -> make(project, owner) -> an instance belonging to `project`
PROJECT_OBJECT_MAKERS: dict[type, Callable[[Project, Any], Any]] = {
    Project: lambda project, owner: project,
    Membership: lambda project, owner: add_member(
        project, UserFactory(username=f"member-of-{project.slug}"), Role.VIEWER
    ),
    Quota: lambda project, owner: project.quota,
    ProjectSecret: lambda project, owner: ProjectSecret.objects.create(project=project, name="TOKEN", value="s3cret"),
    PipelineRun: make_run,
    JobTemplate: lambda project, owner: python_template(project, slug=f"own-{project.slug}"),
    Pipeline: lambda project, owner: pipeline(project, owner, [{"name": "a", "args": {"code": "pass"}}], name="p1"),
    TaskRun: lambda project, owner: TaskRun.objects.create(run=make_run(project, owner), node="a"),
    Schedule: lambda project, owner: Schedule.objects.create(
        project=project,
        pipeline=pipeline(project, owner, [{"name": "a", "args": {"code": "pass"}}], name="p2"),
        cron="0 3 * * *",
    ),
    Dataset: lambda project, owner: dataset_factories.dataset(project, owner, name=f"ds-{Dataset.objects.count()}"),
    DatasetVersion: lambda project, owner: dataset_factories.dataset_version(
        dataset_factories.dataset(project, owner, name=f"dv-{Dataset.objects.count()}")
    ),
    UploadSession: lambda project, owner: dataset_factories.upload_session(
        dataset_factories.dataset(project, owner, name=f"du-{Dataset.objects.count()}")
    ),
    UploadFile: lambda project, owner: dataset_factories.upload_session(
        dataset_factories.dataset(project, owner, name=f"df-{Dataset.objects.count()}")
    ).files.create(path="a.txt", size=3),
}

# model -> make(user) -> an instance that belongs to `user` only (personal objects)
USER_OBJECT_MAKERS: dict[type, Callable[[Any], Any]] = {
    ApiToken: lambda user: create_token(user, name="someone's")[0],
    Notification: lambda user: notify(user, "hello"),
    # The audit log is read by the admins of the entry's project: an entry in a project `user` owns.
    AuditEntry: lambda user: AuditEntry.objects.create(
        action="update", project=ProjectFactory(owner=user, slug=f"audited-{user.pk}", name=f"Audited {user.pk}")
    ),
}


def lookup_value(obj: Any, viewset: Any) -> str:
    field = getattr(viewset, "lookup_field", "pk")
    return str(getattr(obj, field))


# Experiment tracking and the model registry (apps.models)
PROJECT_OBJECT_MAKERS.update(tracking_factories.tracking_object_makers())
PROJECT_OBJECT_MAKERS[Image] = lambda project, owner: Image.objects.create(project=project, name="reg.example/app:1")
# Clusters are platform objects; a project "has" the ones bound to it.
PROJECT_OBJECT_MAKERS.update(
    {
        Cluster: lambda project, owner: bind(ClusterFactory(), project).cluster,
        ProjectCluster: lambda project, owner: bind(ClusterFactory(), project),
    }
)
# Notebooks are one person's: writes need the project role *and* to be the owner (admins may stop or delete).
PROJECT_OBJECT_MAKERS[Notebook] = lambda project, owner: Notebook.objects.create(
    project=project, owner=owner, name=f"nb-{Notebook.objects.count()}"
)
# Models whose writes also need the acting member to own the object: the role test makes it owned by that member,
# so that the role alone decides (owner-only rules have their own tests, e.g. tests/notebooks/test_notebooks_api.py).
OWNED_BY_ACTOR: set[type] = {Notebook}
# Inference services (apps.serving): a bare service, and a revision with one replica of it.
PROJECT_OBJECT_MAKERS[InferenceService] = lambda project, owner: InferenceService.objects.create(
    project=project, name=f"svc-{InferenceService.objects.count()}", created_by=owner
)
PROJECT_OBJECT_MAKERS[Revision] = lambda project, owner: Revision.objects.create(
    service=PROJECT_OBJECT_MAKERS[InferenceService](project, owner), number=1, status=Revision.Status.RETIRED
)

# The app store (apps.appstore): an installation of a small app, and an app a user's project published.
PROJECT_OBJECT_MAKERS[Installation] = lambda project, owner: install(
    add_version(tiny_bundle()), project, owner, name=f"tiny-{Installation.objects.count()}"
)


_publishers = itertools.count()


def make_published_app(user: Any) -> App:
    """An app published from a new project of `user` (a project per call: a write case may come twice)."""
    n = next(_publishers)
    project = ProjectFactory(owner=user, slug=f"publisher-{user.pk}-{n}", name=f"Publisher {user.pk} {n}")
    return add_version(tiny_bundle(), project=project).app


USER_OBJECT_MAKERS[App] = make_published_app


def make_labeling_project(project: Project, owner: Any) -> LabelingProject:
    """A labeling project row without a Label Studio project (ls_project_id None: nothing to reach there)."""
    version = dataset_factories.dataset_version(
        dataset_factories.dataset(project, owner, name=f"dl-{Dataset.objects.count()}"), {"a.png": b"png"}
    )
    return LabelingProject.objects.create(
        project=project, name=f"lp-{LabelingProject.objects.count()}", dataset_version=version,
        kind=LabelingProject.Kind.IMAGE_CLASSIFICATION, labels=["a"], label_config="<View/>",
    )  # fmt: skip


PROJECT_OBJECT_MAKERS[LabelingProject] = make_labeling_project
PROJECT_OBJECT_MAKERS[LabelingTask] = lambda project, owner: LabelingTask.objects.create(
    labeling_project=make_labeling_project(project, owner), path="a.png"
)
PROJECT_OBJECT_MAKERS[Annotation] = lambda project, owner: Annotation.objects.create(
    task=LabelingTask.objects.create(labeling_project=make_labeling_project(project, owner), path="a.png"),
    user=owner,
    username=owner.username,
    ls_annotation_id=Annotation.objects.count() + 1,
)
PROJECT_OBJECT_MAKERS[LabelingExport] = lambda project, owner: LabelingExport.objects.create(
    labeling_project=make_labeling_project(project, owner),
    version=dataset_factories.dataset_version(
        dataset_factories.dataset(project, owner, name=f"de-{Dataset.objects.count()}")
    ),
)

PROJECT_OBJECT_MAKERS[MLBackend] = lambda project, owner: MLBackend.objects.create(
    labeling_project=make_labeling_project(project, owner),
    service=InferenceService.objects.create(project=project, name=f"ml-{InferenceService.objects.count()}"),
    username="u",
    password_hash="!",
)


# Hyperparameter studies (apps.hpo)


def _study(project: Project, owner: Any) -> Study:
    return make_study(project, owner, name=f"study-{Study.objects.count()}")


PROJECT_OBJECT_MAKERS[Study] = _study
PROJECT_OBJECT_MAKERS[Trial] = lambda project, owner: Trial.objects.create(
    study=_study(project, owner), number=0, optuna_trial_id=0, params={"C": 1.0}
)


# Knowledge bases (apps.knowledge): a base, and a document of one (not ingested: the matrix needs the row only).

PROJECT_OBJECT_MAKERS[KnowledgeBase] = lambda project, owner: KnowledgeBase.objects.create(
    project=project, name=f"kb-{KnowledgeBase.objects.count()}", created_by=owner
)
PROJECT_OBJECT_MAKERS[KnowledgeDocument] = lambda project, owner: KnowledgeDocument.objects.create(
    knowledge_base=PROJECT_OBJECT_MAKERS[KnowledgeBase](project, owner),
    name="a.md",
    kind="markdown",
    content=b"# A",
    size=3,
    digest="0" * 64,
)


# Alerts (apps.alerts): a channel, a rule sending to it, an event of the rule and a delivery of the event.


def _alert_event(project: Project, owner: Any) -> AlertEvent:
    rule = make_alert_rule(project, owner)
    return AlertEvent.objects.create(project=project, rule=rule, key="k", subject="s", message="m")


PROJECT_OBJECT_MAKERS[AlertChannel] = lambda project, owner: make_alert_channel(project, owner)
PROJECT_OBJECT_MAKERS[AlertRule] = lambda project, owner: make_alert_rule(project, owner)
PROJECT_OBJECT_MAKERS[AlertEvent] = _alert_event
PROJECT_OBJECT_MAKERS[AlertDelivery] = lambda project, owner: AlertDelivery.objects.create(
    project=project, channel=make_alert_channel(project, owner), kind=AlertDelivery.Kind.TEST
)

# Drift monitors (apps.monitoring): a monitor of a new service, and a report of one.

PROJECT_OBJECT_MAKERS[DriftMonitor] = lambda project, owner: DriftMonitor.objects.create(
    project=project, service=PROJECT_OBJECT_MAKERS[InferenceService](project, owner), created_by=owner
)
PROJECT_OBJECT_MAKERS[DriftReport] = lambda project, owner: DriftReport.objects.create(
    monitor=PROJECT_OBJECT_MAKERS[DriftMonitor](project, owner), status=DriftReport.Status.SKIPPED
)

# Continuous training (apps.retraining): a policy (its pipeline, dataset and model made on the way), a data monitor
# of it, a check, a retraining and a decision.


def _retrain_policy(project: Project, owner: Any) -> Any:
    from apps.retraining.models import RetrainPolicy
    from tests.retraining.factories import policy

    return RetrainPolicy.objects.filter(project=project).first() or policy(project, owner)


def _data_monitor(project: Project, owner: Any) -> Any:
    from apps.retraining.models import DataMonitor
    from apps.retraining.services import create_monitor

    rule = _retrain_policy(project, owner)
    existing = DataMonitor.objects.filter(project=project).first()
    return existing or create_monitor(project, owner, name="iris-watch", dataset=rule.dataset, policy=rule)


def _data_check(project: Project, owner: Any) -> Any:
    from apps.retraining.models import DataCheck

    monitor = _data_monitor(project, owner)
    version = dataset_factories.dataset_version(monitor.dataset)
    return DataCheck.objects.create(monitor=monitor, version=version, message="m")


def _retraining(project: Project, owner: Any) -> Any:
    from apps.retraining.models import Retraining

    rule = _retrain_policy(project, owner)
    return Retraining.objects.create(project=project, policy=rule, reason="manual", status="skipped")


def _decision(project: Project, owner: Any) -> Any:
    from apps.retraining.models import PromotionDecision
    from tests.retraining.factories import version_with

    rule = _retrain_policy(project, owner)
    return PromotionDecision.objects.create(
        project=project, policy=rule, registered_model=rule.registered_model, alias=rule.alias,
        challenger=version_with(project, owner, 0.9), metric=rule.metric, outcome="pending",
    )  # fmt: skip


def _register_retraining_makers() -> None:
    from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy

    PROJECT_OBJECT_MAKERS[RetrainPolicy] = _retrain_policy
    PROJECT_OBJECT_MAKERS[DataMonitor] = _data_monitor
    PROJECT_OBJECT_MAKERS[DataCheck] = _data_check
    PROJECT_OBJECT_MAKERS[Retraining] = _retraining
    PROJECT_OBJECT_MAKERS[PromotionDecision] = _decision


_register_retraining_makers()
