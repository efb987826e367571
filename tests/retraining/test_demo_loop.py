"""The acceptance loop with real parts: the demo project, a real local agent (tasks track and register through the
API of a live server) and a real Celery worker on a broker of the test's own. Uploading an iris version with one
shifted feature leads, with nothing else done, to a dataset-drift alert, a retraining run of the iris pipeline on the
new version, and a promotion decision with both metrics, on the same test split, on the decisions page."""

from __future__ import annotations

import csv
import io
import time

import pytest
from django.test import Client

from apps.alerts.models import AlertEvent
from apps.console.demo import populate
from apps.datasets.models import Dataset
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from apps.models.models import ModelAlias
from apps.retraining.gate import metric_of
from apps.retraining.models import PromotionDecision, Retraining
from tests.conftest import user_client
from tests.datasets.helpers import upload_version
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import AgentProcess, drive
from tests.outbox.conftest import private_broker, start_worker  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def shifted(dataset: Dataset, column: str = "petal_length", by: float = 3.0) -> bytes:
    """The newest version's iris.csv with `column` moved by `by` in every row."""
    from apps.retraining.datachange import table

    header, rows = table(dataset.versions.order_by("-number").first())
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    at = header.index(column)
    for row in rows:
        writer.writerow([f"{float(v) + by:.1f}" if i == at else v for i, v in enumerate(row)])
    return out.getvalue().encode()


def output_of(run) -> str:
    """The failed tasks' output, for the assertion message."""
    lines = LogLine.objects.filter(run=run, task__status="failed").order_by("pk").values_list("node", "text")
    return "\n".join(f"{node}: {text}" for node, text in lines)


def wait_for(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_a_drifted_iris_upload_retrains_and_decides_without_a_click(
    live_asgi,
    tmp_path,
    settings,
    monkeypatch,
    private_broker,  # noqa: F811
    start_worker,  # noqa: F811
):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url
    monkeypatch.setenv("SITE_URL", live_asgi.url)  # the worker dispatches tasks too: they reach this API
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="iris-lab")
    iris = populate(project, owner)
    agent = AgentProcess(tmp_path, env={"SITE_URL": live_asgi.url, **private_broker.worker_env})
    agent.start()
    worker = start_worker(private_broker)
    try:
        with private_broker.up():
            first = drive(start_run(iris, owner), timeout=300)  # the champion: the demo's pipeline, once
            assert first.status == "succeeded", (first.reason, output_of(first))
            model = project.registered_models.get(name="iris-classifier")
            champion = ModelAlias.objects.get(registered_model=model, alias="staging").model_version

            dataset = Dataset.objects.get(project=project, name="iris")
            upload_version(user_client(owner), project, dataset, {"iris.csv": shifted(dataset)}, chunk=64 * 1024)

            wait_for(lambda: Retraining.objects.filter(project=project).exclude(run=None).exists(),
                     "no retraining started", 120)  # fmt: skip
            retraining = Retraining.objects.get(project=project)
            assert (retraining.reason, retraining.dataset_version.number) == ("data", 3)
            run = drive(retraining.run, timeout=300)
            assert run.status == "succeeded", (run.reason, output_of(run))
            wait_for(lambda: PromotionDecision.objects.filter(project=project).exists(), "no decision", 120)
            wait_for(lambda: AlertEvent.objects.filter(rule__name="iris-dataset-drift").exists(), "no alert", 60)
    finally:
        worker.terminate()
        agent.stop()

    alert = AlertEvent.objects.get(rule__name="iris-dataset-drift")
    assert "iris@3 drifted from iris@2: petal_length" in alert.message
    decision = PromotionDecision.objects.get(project=project)
    assert decision.champion == champion
    assert decision.challenger.run.source_pipeline_run == run
    assert decision.challenger_value is not None
    assert decision.champion_value is not None
    # the retraining's evaluate step scored the champion on the new version's test split, and the gate used that
    assert decision.basis == PromotionDecision.Basis.SAME_SPLIT, decision.message
    assert decision.champion_value == metric_of(decision.challenger, "champion_test_accuracy")
    assert metric_of(decision.challenger, "champion_version") == champion.version
    assert decision.outcome in ("promoted", "rejected")  # the demo's policy decides without approval
    staging = ModelAlias.objects.get(registered_model=model, alias="staging").model_version
    assert staging == (decision.challenger if decision.outcome == "promoted" else champion)
    browser = Client()  # the decisions page shows both metrics
    browser.force_login(owner)
    html = browser.get(f"/p/{project.slug}/retraining/decisions/").content.decode()
    assert f"{decision.challenger_value:.4f}" in html
    assert f"{decision.champion_value:.4f}" in html
    assert 'data-basis="same_split"' in html
