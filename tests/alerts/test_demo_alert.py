"""`manage.py demo`'s alert part: an in-app channel and a rule on the iris pipeline's failures, made once."""

from __future__ import annotations

import pytest

from apps.alerts import demo
from apps.alerts.models import AlertRule, Channel
from apps.console.demo import examples
from apps.serving.models import InferenceService
from tests.factories import pipeline

pytestmark = pytest.mark.django_db


def test_the_demo_makes_one_rule_and_one_channel_however_often_it_runs(world):
    pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "pass"}}], name="iris")
    InferenceService.objects.create(project=world.project_a, name="iris", created_by=world.alice)
    demo.populate(world.project_a, world.alice)
    rule = demo.populate(world.project_a, world.alice)
    assert AlertRule.objects.get(name="iris-run-failed") == rule
    assert (rule.kind, rule.params) == ("run_failed", {"pipeline": "iris"})
    drift = AlertRule.objects.get(name="iris-drift")
    assert (drift.kind, drift.params) == ("drift_score", {"service": "iris"})
    assert AlertRule.objects.count() == 2
    assert list(rule.channels.values_list("name", "kind")) == [("team", "inapp")]
    assert Channel.objects.count() == 1


def test_the_demo_orders_it_after_the_iris_pipeline():
    names = [name for name, _make in examples()]
    assert names.index("iris-run-failed alert") > names.index("iris pipeline")
