"""The alerts part of `manage.py demo` (apps/console/demo.py orders the parts): an in-app channel to every member,
a rule telling them when a run of the iris pipeline fails (and when it works again), and one when the iris service's
inputs drift from its training data (the drift monitor's own threshold)."""

from __future__ import annotations

from typing import Any

from apps.alerts import services
from apps.alerts.models import AlertRule, Channel
from apps.projects.models import Project

CHANNEL = "team"
RULE = "iris-run-failed"
DRIFT_RULE = "iris-drift"


def populate(project: Project, user: Any) -> AlertRule:
    """Idempotently: the channel and the rule (after the iris pipeline, which the rule names)."""
    channel = Channel.objects.filter(project=project, name=CHANNEL).first() or services.create_channel(
        project, user, name=CHANNEL, kind=Channel.Kind.INAPP
    )
    rule = AlertRule.objects.filter(project=project, name=RULE).first()
    if rule is None:
        rule = services.create_rule(
            project, user, name=RULE, kind="run_failed", params={"pipeline": "iris"}, channels=[channel]
        )
    has_service = project.inference_services.filter(name="iris").exists()  # the serving demo's
    if has_service and not AlertRule.objects.filter(project=project, name=DRIFT_RULE).exists():
        services.create_rule(
            project, user, name=DRIFT_RULE, kind="drift_score", params={"service": "iris"}, channels=[channel]
        )
    return rule
