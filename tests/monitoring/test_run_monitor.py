"""The scheduled drift check end to end: a real iris model served through the router with payload logging, the
reference found through lineage (model version → tracking run → dataset version), unshifted inputs → no drift,
a shifted feature → a drifted report, the `drift_detected` signal, and the chart's series."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import httpx
import numpy as np
import pytest
from django.utils import timezone

from apps.datasets.models import Direction
from apps.datasets.services import record_usage
from apps.jobs.models import TaskRun
from apps.models.services import log_inputs
from apps.monitoring import data, services, tasks
from apps.monitoring.models import DriftMonitor, DriftReport
from apps.monitoring.signals import drift_detected
from apps.serving import payloads
from apps.serving.models import PayloadLog
from apps.serving.router.asgi import invalidate
from tests import factories
from tests.access import make_run
from tests.serving.replicas import ModelServer, add_revision, infer_body, iris_model, make_service

COLUMNS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
INFER = "/serving/project-a/iris/v2/models/iris/infer"


def iris_csv() -> bytes:
    from sklearn.datasets import load_iris

    iris = load_iris()
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*COLUMNS, "species"])
    for row, target in zip(iris.data, iris.target, strict=True):
        writer.writerow([*(f"{v:.1f}" for v in row), iris.target_names[target]])
    return out.getvalue().encode()


def trained_version(world):
    """A model version whose run logged the iris dataset's v1 as its training input (as the demo's runs do)."""
    dataset = factories.dataset(world.project_a, world.alice, name="iris")
    version = factories.dataset_version(dataset, {"iris.csv": iris_csv()})
    model_version = factories.model_version(world.project_a, world.alice, model_name="iris-classifier")
    source = {"name": "iris", "digest": version.digest[:12], "source_type": "portal", "source": "iris@1"}
    log_inputs(model_version.run, [{"dataset": source, "tags": [{"key": "mlflow.data.context", "value": "training"}]}])
    return version, model_version


@pytest.mark.django_db
def test_lineage_finds_the_version_a_pipeline_task_read(world):
    dataset = factories.dataset(world.project_a, world.alice, name="flowers")
    version = factories.dataset_version(dataset, {"f.csv": b"a,b\n1,2\n"})
    task = TaskRun.objects.create(run=make_run(world.project_a, world.alice), node="train")
    record_usage(version, task_run=task, direction=Direction.READ)
    model_version = factories.model_version(world.project_a, world.alice)
    model_version.run.source_task = task
    model_version.run.save(update_fields=["source_task"])
    service = make_service(world.project_a, "flowers")
    service.model_version = model_version
    service.save()

    monitor = DriftMonitor.objects.create(project=world.project_a, service=service)

    assert data.reference_of(monitor) == version


@pytest.mark.django_db
def test_without_lineage_the_report_says_why(world):
    service = make_service(world.project_a, "bare")
    monitor = DriftMonitor.objects.create(project=world.project_a, service=service)

    report = services.run_monitor(monitor)

    assert report.status == DriftReport.Status.FAILED
    assert "serves no registered model version" in report.message


def test_the_request_features_take_the_reference_names():
    body = infer_body([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert data.request_features(body, COLUMNS) == {
        "sepal_length": [1, 5], "sepal_width": [2, 6], "petal_length": [3, 7], "petal_width": [4, 8],
    }  # fmt: skip
    colour = {"name": "colour", "shape": [2], "datatype": "BYTES", "data": ["red", "blue"]}
    size = {"name": "size", "shape": [2, 1], "datatype": "FP32", "data": [[1.0], [2.0]]}
    per_column = {"inputs": [colour, size]}
    assert data.request_features(per_column, []) == {"colour": ["red", "blue"], "size": [1.0, 2.0]}


@pytest.fixture
def heard():
    """What `drift_detected` said during the test."""
    said: list[dict] = []

    def receiver(sender, **kwargs):
        said.append(kwargs)

    drift_detected.connect(receiver, dispatch_uid="test-drift")
    yield said
    drift_detected.disconnect(dispatch_uid="test-drift")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    replica = ModelServer(iris_model(tmp_path_factory.mktemp("iris"))).start()
    yield replica
    replica.stop()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_scheduled_check_reports_drift_of_shifted_inputs(world, server, live_asgi, heard):
    reference, model_version = trained_version(world)
    service = make_service(world.project_a)
    revision = add_revision(service, 1, server)
    revision.model_version = model_version
    revision.save(update_fields=["model_version"])
    service.current_revision, service.payload_log_percent = revision, 100
    service.save()
    invalidate()
    payloads.flush()
    PayloadLog.objects.all().delete()
    monitor = services.create_monitor(world.project_a, world.alice, service="iris", target_column="species")

    from sklearn.datasets import load_iris

    rows = load_iris().data
    rng = np.random.default_rng(5)
    token = factories.make_token(world.alice)
    with httpx.Client(base_url=live_asgi.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:

        def send(batch):
            for chunk in np.array_split(batch, 4):
                assert client.post(INFER, json=infer_body(chunk.round(1).tolist())).status_code == 200
            payloads.flush()

        send(rows[rng.choice(len(rows), 120)])  # the training distribution
        first = tasks.check_monitors()  # due at once: created with next_run_at = now

        assert len(first) == 1
        calm = DriftReport.objects.get(pk=first[0])
        assert calm.status == DriftReport.Status.OK, calm.features
        assert calm.reference_version == reference
        assert calm.reference_rows == 150
        assert calm.current_rows == 120
        assert set(calm.features) == set(COLUMNS)
        assert heard == []
        assert tasks.check_monitors() == []  # not due again before its interval

        PayloadLog.objects.all().delete()
        shifted = rows[rng.choice(len(rows), 120)].copy()
        shifted[:, 2] += 3.0  # petal_length, three centimetres longer
        send(shifted)
        DriftMonitor.objects.filter(pk=monitor.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
        second = tasks.check_monitors()

    report = DriftReport.objects.get(pk=second[0])
    assert report.status == DriftReport.Status.DRIFTED
    worst = max(report.features, key=lambda k: report.features[k]["score"])
    assert worst == "petal_length"
    assert report.score == report.features["petal_length"]["psi"] >= monitor.threshold
    assert report.features["petal_length"]["ks_p"] < 1e-6
    assert report.features["sepal_width"]["score"] < monitor.threshold
    assert len(heard) == 1
    assert heard[0]["report"].pk == report.pk
    assert heard[0]["monitor"].pk == monitor.pk
    assert heard[0]["score"] == report.score
    chart = services.series(monitor)
    assert chart["overall"] == [calm.score, report.score]
    assert chart["features"]["petal_length"][1] == report.score


@pytest.mark.django_db
def test_too_few_logged_rows_skip_the_check(world):
    reference, model_version = trained_version(world)
    service = make_service(world.project_a)
    service.model_version = model_version
    service.save()
    monitor = services.create_monitor(world.project_a, world.alice, service=service, min_rows=10)

    report = services.run_monitor(monitor)

    assert report.status == DriftReport.Status.SKIPPED
    assert report.reference_version == reference
    assert report.message == "0 logged rows in the window; 10 needed."
