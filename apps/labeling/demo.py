"""The labeling part of `manage.py demo`: scikit-learn's 8×8 digits as PNGs (dataset `digits`), a digits classifier
(`digits-classifier@production`, served as `digits`) and the labeling project `digits` in Label Studio with that
service attached as its auto-labeler and every task pre-annotated.

The demo runs before `make run` starts Label Studio, the web process and the agent, so only the portal's own part
is made at once (`populate`); `complete` — the Celery task `tasks.complete_demo`, queued by `populate` — makes the
rest step by step as each piece comes up (Label Studio ready → the labeling project; the portal answering Label
Studio → the ML backend; the service serving → the predictions), trying again every RETRY_SECONDS until a deadline.
`LABELING=off`: nothing of this is made. Everything here is idempotent.
"""

from __future__ import annotations

import io
import logging
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from apps.datasets import services as dataset_services
from apps.datasets.models import Dataset, DatasetVersion
from apps.labeling import autolabel, server
from apps.labeling.client import LabelStudioError, LabelStudioUnavailable
from apps.labeling.models import LabelingProject, MLBackend
from apps.labeling.services import create_labeling_project
from apps.models import artifacts, registry
from apps.models import services as tracking
from apps.models.metrics import make_point
from apps.models.models import Experiment, ModelAlias, RegisteredModel, Run, now_ms
from apps.outbox.services import enqueue
from apps.projects.models import Project
from apps.serving.models import InferenceService
from apps.serving.services import create_service
from apps.serving.services import deploy as deploy_service

logger = logging.getLogger(__name__)

DATASET = "digits"
EXPERIMENT = "digits-models"
MODEL = "digits-classifier"
ALIAS = "production"
SERVICE = "digits"
NAME = "digits"  # the labeling project
COUNT = 48  # images to label: the first COUNT of scikit-learn's 1,797 (the classifier is trained on the others)
SIDE = 64  # pixels of a PNG: the 8×8 digit enlarged, so that people see it
LABELS = [str(n) for n in range(10)]
WAIT_SECONDS = 30 * 60  # how long `complete` keeps trying (Label Studio's first start: ~3 min on a busy host)
RETRY_SECONDS = 15


def digit_pngs(count: int = COUNT) -> dict[str, bytes]:
    """`digit-<index>-<true digit>.png`: light ink on black, the 0..16 intensities as 0..255, enlarged to SIDE×SIDE
    (the auto-labeler shrinks them back to the model's 8×8 input)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    files = {}
    for index in range(count):
        pixels = (digits.images[index] * 255 / 16).round().astype("uint8")
        out = io.BytesIO()
        Image.fromarray(pixels, mode="L").resize((SIDE, SIDE), Image.NEAREST).save(out, format="PNG")
        files[f"digit-{index:02d}-{digits.target[index]}.png"] = out.getvalue()
    return files


def digits_dataset(project: Project, user: Any, count: int = COUNT) -> DatasetVersion:
    """Idempotently: dataset `digits` with one version of `count` digit PNGs under `images/`."""
    dataset = Dataset.objects.filter(project=project, name=DATASET).first()
    if dataset is None:
        dataset = dataset_services.create_dataset(
            project, user, name=DATASET, tags=["images", "classification", "demo"], licence="CC-BY-4.0",
            description="Handwritten digits, 8×8 pixels, for the demo's labeling project.",
            source="scikit-learn's bundled copy of the UCI optical digits (sklearn.datasets.load_digits)",
        )  # fmt: skip
    version = dataset.versions.order_by("-number").first()
    if version is not None:
        return version
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        for name, content in digit_pngs(count).items():
            (folder / name).write_bytes(content)
        return dataset_services.version_from_directory(
            dataset, Path(tmp), user=user, message=f"The first {count} digits as PNGs"
        )


def digits_model(project: Project, user: Any) -> RegisteredModel:
    """Idempotently: a tracked run training a logistic regression on the digits the labeling project does not hold,
    and its model registered as `digits-classifier`, aliased `production`."""
    model = RegisteredModel.objects.filter(project=project, name=MODEL).first() or registry.create_registered_model(
        project, MODEL, description="Reads a handwritten digit (8×8 pixels, 0..16): the demo's auto-labeler."
    )
    if ModelAlias.objects.filter(registered_model=model, alias=ALIAS).exists():
        return model
    run = _trained_run(project, user)
    version = model.versions.filter(run=run).first() or registry.create_model_version(
        model, source=f"runs:/{run.run_uuid}/model", run=run, user_id=getattr(user, "username", ""),
        description="Logistic regression on scikit-learn's digits (made by `manage.py demo`).",
    )  # fmt: skip
    registry.set_alias(model, ALIAS, version.version)
    return model


def _trained_run(project: Project, user: Any) -> Run:
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    experiment = Experiment.objects.filter(project=project, name=EXPERIMENT).first() or tracking.create_experiment(
        project, EXPERIMENT, tags=[("mlflow.note.content", "The demo labeling project's auto-labeler.")]
    )
    done = Run.objects.filter(experiment=experiment, status="FINISHED").order_by("pk").first()
    if done is not None:
        return done
    x, y = load_digits(return_X_y=True)
    x_train, y_train, x_test, y_test = x[COUNT * 2 :], y[COUNT * 2 :], x[COUNT : COUNT * 2], y[COUNT : COUNT * 2]
    start = now_ms()
    run = tracking.create_run(
        experiment, user=user, run_name="logreg-digits", start_time=start,
        tags=[("mlflow.source.name", "apps/labeling/demo.py"), ("mlflow.source.type", "LOCAL"), ("demo", "digits")],
    )  # fmt: skip
    estimator = LogisticRegression(max_iter=300, random_state=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        estimator.fit(x_train, y_train)
    accuracy = float(estimator.score(x_test, y_test))
    tracking.log_batch(
        run, metrics=[make_point("accuracy", accuracy, start, 0)], params=[("model", "logistic_regression")]
    )
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    with tempfile.TemporaryDirectory() as tmp:
        folder = mlflow_model_dir(estimator, Path(tmp))
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                artifacts.save(f"{base}/model/{path.relative_to(folder).as_posix()}", io.BytesIO(path.read_bytes()))
    return tracking.update_run(run, status="FINISHED", end_time=now_ms())


def digits_service(project: Project, user: Any, model: RegisteredModel) -> InferenceService:
    """Idempotently: `digits`, following `digits-classifier@production`; it deploys once an agent runs
    (`complete` deploys it: the demo runs before `make run` starts the agent)."""
    existing = InferenceService.objects.filter(project=project, name=SERVICE).first()
    if existing is not None:
        return existing
    return create_service(
        project, user, name=SERVICE, allow_waiting=True, registered_model=model, follow_alias=ALIAS,
        description="The digits classifier, auto-labeling the demo's labeling project.",
        cpu="0.5", memory="512Mi", min_replicas=1, max_replicas=1, scale_target=8,
    )  # fmt: skip


def populate(project: Project, user: Any) -> InferenceService | None:
    """The portal's own part (dataset, model, service), then `complete` queued for the rest. None when labeling is
    off (nothing made)."""
    if not server.enabled():
        return None
    digits_dataset(project, user)
    service = digits_service(project, user, digits_model(project, user))
    if not done(project):
        from apps.labeling.tasks import complete_demo

        enqueue(complete_demo, project.pk, getattr(user, "pk", None), time.time() + WAIT_SECONDS)
    return service


def done(project: Project) -> bool:
    labeling = LabelingProject.objects.filter(project=project, name=NAME).first()
    return bool(
        labeling is not None
        and MLBackend.objects.filter(labeling_project=labeling).exists()
        and not labeling.tasks.filter(score__isnull=True).exists()
    )


def labeling_project(project: Project, user: Any, version: DatasetVersion | None = None) -> LabelingProject:
    """Idempotently: the labeling project `digits` over the digits dataset's version (image classification, 0..9).
    Raises LabelStudioUnavailable while Label Studio is down or starting."""
    existing = LabelingProject.objects.filter(project=project, name=NAME).first()
    if existing is not None:
        return existing
    version = version or digits_dataset(project, user)
    return create_labeling_project(
        project, user, name=NAME, dataset_version=version, kind=LabelingProject.Kind.IMAGE_CLASSIFICATION,
        labels=LABELS, description="Which digit is it? Pre-annotated by the digits service.",
    )  # fmt: skip


class NotYet(Exception):
    """A step of `advance` cannot be taken yet; the message says which."""


def advance(project: Project, user: Any) -> LabelingProject:
    """One pass over the steps still to do; raises NotYet (or Label Studio's errors) at the first that must wait."""
    labeling = labeling_project(project, user)
    service = InferenceService.objects.filter(project=project, name=SERVICE).first()
    if service is None:
        return labeling  # someone removed it: the labeling project stands without an auto-labeler
    backend = MLBackend.objects.filter(labeling_project=labeling).select_related("service").first()
    if backend is None:
        backend = autolabel.attach(labeling, service, user)  # Label Studio calls the portal's web process back
    if labeling.tasks.filter(score__isnull=True).exists():
        if service.current_revision_id is None and service.status in (
            InferenceService.Status.PENDING,
            InferenceService.Status.FAILED,
        ):
            deploy_service(service, user)  # ValidationError while no agent runs
        try:
            autolabel.preannotate_all(backend)
        except autolabel.NotServing as exc:
            raise NotYet(str(exc)) from exc
    return labeling


WAITING = (NotYet, ValidationError, LabelStudioUnavailable, LabelStudioError, OSError)


def complete(project_id: int, user_id: int | None, until: float) -> bool:
    """The task body: advance; while a step must wait, queue itself again (until `until`, a Unix time; then log
    what is missing: the pages and the labeling project's buttons can finish it). True when everything is made."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None or not server.enabled():
        return False
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    try:
        advance(project, user)
    except WAITING as exc:
        if time.time() < until:
            from apps.labeling.tasks import complete_demo

            logger.info("demo labeling project: waiting (%s)", exc)
            enqueue(complete_demo, project_id, user_id, until, countdown=RETRY_SECONDS)
        else:
            logger.warning("demo labeling project: gave up waiting: %s", exc)
        return False
    return True
