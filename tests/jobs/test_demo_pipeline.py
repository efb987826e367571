"""The demo's "iris" pipeline end to end through a real local agent: load the iris dataset, split, train
(tracked), evaluate, register the model with an alias; and `demo --run`, which runs it, then "iris-automl" (AutoML →
explain → ONNX INT8 → serve, where the train environment is built; tests/jobs/test_automl_demo_pipeline.py checks
it in depth) and the memory hog."""

from __future__ import annotations

import json
import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.console.demo import populate
from apps.jobs.models import PipelineRun
from apps.jobs.services import start_run
from apps.models.models import ModelVersion
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import drive

# All databases: with a real commit, the demo's welcome notification is published to the embedded channel
# layer, which lives in a database of its own.
pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_the_iris_pipeline_runs_to_success_with_a_good_accuracy(api_agent, settings):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="iris-lab")
    iris = populate(project, owner)
    assert populate(project, owner) == iris  # idempotent

    run = drive(start_run(iris, owner), timeout=240)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    final = {t.node: t.status for t in run.tasks.order_by("node", "attempt")}
    assert set(final.values()) == {"succeeded"}
    assert list(final) == ["evaluate", "load", "register", "split", "train"]
    evaluate = run.tasks.filter(node="evaluate").latest("attempt")
    metrics = json.loads((Path(evaluate.output_dir) / "metrics.json").read_text())
    assert metrics["accuracy"] > 0.8
    tracked = run.tasks.get(node="train").tracking_runs.get()
    assert (tracked.experiment.name, tracked.experiment.project, tracked.source_pipeline_run) == ("iris", project, run)
    assert tracked.image == settings.PORTAL_IMAGE  # the train template's: "{portal}", the portal's own image
    assert [i.name for i in tracked.inputs.all()] == ["iris@v2"]  # what the load node read
    version = ModelVersion.objects.get(  # the demo's own experiment registered the production version
        registered_model__project=project, registered_model__name="iris-classifier", run=tracked
    )
    assert (version.run, version.status, [a.alias for a in version.aliases.all()]) == (tracked, "READY", ["staging"])


def test_demo_run_prints_the_outcome_and_the_accuracy(agent, settings, client):
    settings.SITE_URL = "http://127.0.0.1:9"  # nothing answers: the command serves the API itself
    out = StringIO()

    call_command("demo", "--run", stdout=out)

    output = out.getvalue()
    run = PipelineRun.objects.get(project__slug="demo", pipeline_name="iris")
    assert run.status == "succeeded", output
    assert f"{run}: succeeded" in output
    accuracy = float(output.split("accuracy=")[1].split(",")[0].split()[0])
    assert accuracy > 0.8
    assert "No agent was running" not in output  # the fixture's agent did the work
    assert "serving the API from this process" in output
    assert "Registered: iris-classifier version 2 (alias staging)" in output  # 1 is the demo's production model
    # Then the memory hog, which fails on purpose, with its diagnosis and the next step.
    hog = PipelineRun.objects.get(project__slug="demo", pipeline_name="memory-hog")
    assert hog.status == "failed"
    assert "  hog: out of memory: the task used " in output
    assert "over its memory limit of 128 MiB\n    Next step: Lower its peak memory: a smaller batch size" in output
    if not os.access(settings.PORTAL_TASK_ENVS["train"], os.X_OK):
        assert "Not running iris-automl: its explain and ONNX steps need the train environment" in output
        return
    automl = PipelineRun.objects.get(project__slug="demo", pipeline_name="iris-automl")
    assert automl.status == "succeeded", output
    assert "Registered: iris-automl version 1 (alias none)" in output
    assert "Registered: iris-automl version 2 (alias onnx, ONNX int8)" in output
    assert "Deployed: service iris-onnx revision 1 at /serving/demo/iris-onnx/" in output
    # The pages the demo points at: the ONNX INT8 version's table, and the importance chart (its source's, and its own)
    client.force_login(automl.created_by)
    for number in (2, 1):
        version = ModelVersion.objects.get(
            registered_model__project__slug="demo", registered_model__name="iris-automl", version=number
        )
        page = client.get(reverse("models:version-detail", kwargs={"project": "demo", "pk": version.pk}))
        assert page.status_code == 200
        html = page.content.decode()
        assert 'id="explanation-chart"' in html
        assert ('id="optimisation"' in html) == (number == 2)
        assert ("<td>int8</td>" in html) == (number == 2)
