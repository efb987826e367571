"""The demo's "iris" pipeline end to end through a real local agent: load, split, train, evaluate."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.jobs.demo import populate
from apps.jobs.models import PipelineRun
from apps.jobs.services import start_run
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import drive

# All databases: with a real commit, the demo's welcome notification is published to the embedded channel
# layer, which lives in a database of its own.
pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_the_iris_pipeline_runs_to_success_with_a_good_accuracy(agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="iris-lab")
    iris = populate(project, owner)
    assert populate(project, owner) == iris  # idempotent

    run = drive(start_run(iris, owner), timeout=240)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    final = {t.node: t.status for t in run.tasks.order_by("node", "attempt")}
    assert final == {"load": "succeeded", "split": "succeeded", "train": "succeeded", "evaluate": "succeeded"}
    evaluate = run.tasks.filter(node="evaluate").latest("attempt")
    metrics = json.loads((Path(evaluate.output_dir) / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.8


def test_demo_run_prints_the_outcome_and_the_accuracy(agent):
    out = StringIO()

    call_command("demo", "--run", stdout=out)

    output = out.getvalue()
    run = PipelineRun.objects.get(project__slug="demo", pipeline_name="iris")
    assert run.status == "succeeded", output
    assert f"{run}: succeeded" in output
    accuracy = float(output.split("accuracy=")[1].split(",")[0].split()[0])
    assert accuracy > 0.8
    assert "No agent was running" not in output  # the fixture's agent did the work
