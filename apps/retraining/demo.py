"""The continuous-training part of `manage.py demo` (apps/console/demo.py orders the parts): a retrain policy of the
iris pipeline on the iris dataset (the new version goes into its `load` node; its `register` node moves the alias
"challenger" instead of "staging"; its `evaluate` node scores the champion at "staging" on the same test split; the
gate moves "staging", which the iris service follows), a data monitor that starts it when a new iris version changed
≥ 10 % of its rows or shifted a feature, the iris drift monitor as a second trigger, and alert rules telling the team
of a drifted dataset version and of each decision."""

from __future__ import annotations

from typing import Any

from apps.alerts import services as alerts
from apps.alerts.models import AlertRule, Channel
from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline
from apps.models.models import RegisteredModel
from apps.monitoring.models import DriftMonitor
from apps.projects.models import Project
from apps.retraining.models import DataMonitor, RetrainPolicy
from apps.retraining.services import create_monitor, create_policy

POLICY = "iris-retrain"
MONITOR = "iris-watch"
# The registered version moves "challenger" (not the template's "staging": the gate moves that), and the evaluate step
# scores the champion ("{champion}": the version at "staging") on the new model's test split.
ARGUMENTS = {"register": {"alias": "challenger"}, "evaluate": {"champion": "{champion}"}}
RULES = {"iris-dataset-drift": "dataset_drift", "iris-retrain-decision": "promotion_decision"}


def populate(project: Project, user: Any) -> RetrainPolicy | None:
    """Idempotently (None until the iris pipeline, dataset and model exist)."""
    pipeline = Pipeline.objects.filter(project=project, name="iris").first()
    dataset = Dataset.objects.filter(project=project, name="iris").first()
    model = RegisteredModel.objects.filter(project=project, name="iris-classifier").first()
    if pipeline is None or dataset is None or model is None:
        return None
    policy = RetrainPolicy.objects.filter(project=project, name=POLICY).first()
    if policy is None:
        policy = create_policy(
            project, user, name=POLICY, pipeline=pipeline, dataset=dataset, registered_model=model,
            dataset_argument="load.dataset", arguments=ARGUMENTS, alias="staging", metric="test_accuracy",
            margin=0.0, cooldown_minutes=10,
            drift_monitor=DriftMonitor.objects.filter(project=project, service__name="iris").first(),
        )  # fmt: skip
    if not DataMonitor.objects.filter(project=project, name=MONITOR).exists():
        create_monitor(project, user, name=MONITOR, dataset=dataset, policy=policy, min_changed_percent=10,
                       drift_threshold=0.2, target_column="species")  # fmt: skip
    channel = Channel.objects.filter(project=project, name="team").first()  # the alerts demo's
    for name, kind in RULES.items():
        if channel is not None and not AlertRule.objects.filter(project=project, name=name).exists():
            alerts.create_rule(project, user, name=name, kind=kind, params={}, channels=[channel])
    return policy
