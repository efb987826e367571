"""The /api/v1/ twins: experiments, tracked runs (MLflow filter grammar), the LTTB metric series, registry."""

from __future__ import annotations

import numpy as np
import pytest

from apps.models import services
from apps.models.metrics import insert_points, make_point
from portal.lib.lttb import lttb as downsample
from tests.conftest import user_client
from tests.factories import model_version, tracking_run


@pytest.mark.smoke
def test_experiments_and_runs(world):
    client = user_client(world.alice)
    response = client.post("/api/v1/experiments/", {"project": "project-a", "name": "api-exp"}, format="json")
    assert response.status_code == 201, response.content
    assert (
        client.post("/api/v1/experiments/", {"project": "project-a", "name": "api-exp"}, format="json").status_code
        == 400
    )
    good = tracking_run(world.project_a, world.alice, name="good", experiment_name="api-exp")
    bad = tracking_run(world.project_a, world.alice, name="bad", experiment_name="api-exp")
    services.log_batch(good, metrics=[make_point("acc", 0.9, 1, 0)], params=[("lr", "0.1")])
    services.log_batch(bad, metrics=[make_point("acc", 0.2, 1, 0)])
    rows = client.get("/api/v1/tracking-runs/", {"filter": "metrics.acc > 0.5"}).json()["results"]
    assert [r["name"] for r in rows] == ["good"]
    assert rows[0]["params"] == {"lr": "0.1"}
    assert rows[0]["metrics"]["acc"]["value"] == 0.9
    assert client.get("/api/v1/tracking-runs/", {"filter": "metrics.acc >"}).status_code == 400
    assert user_client(world.charlie).get(f"/api/v1/tracking-runs/{good.run_uuid}/").status_code == 404


def test_metric_series_is_downsampled_with_lttb(world):
    run = tracking_run(world.project_a, world.alice)
    n = 200_000
    steps = np.arange(n)
    values = np.sin(steps / 5000.0) + (steps == 123_456) * 10  # one spike LTTB must keep
    from django.db import transaction

    with transaction.atomic():
        insert_points(run.pk, [make_point("loss", float(v), 1, int(s)) for s, v in zip(steps, values, strict=True)])
    client = user_client(world.alice)
    response = client.get(f"/api/v1/tracking-runs/{run.run_uuid}/metric-series/", {"key": "loss", "points": 500})
    assert response.status_code == 200
    data = response.json()
    assert data["total"] == n
    assert len(data["steps"]) == len(data["values"]) == 500
    assert data["steps"][0] == 0
    assert data["steps"][-1] == n - 1
    assert max(data["values"]) == pytest.approx(values[123_456])  # the spike survives


def test_lttb_keeps_short_series_whole():
    x, y = np.arange(10.0), np.arange(10.0)
    assert downsample(x, y, 20)[0].tolist() == x.tolist()
    sx, _sy = downsample(np.arange(100.0), np.arange(100.0) ** 2, 10)
    assert len(sx) == 10
    assert list(sx) == sorted(sx)


def test_registry_twins(world):
    version = model_version(world.project_a, world.alice)
    client = user_client(world.alice)
    rows = client.get("/api/v1/model-versions/").json()["results"]
    assert [(r["version"], r["status"]) for r in rows] == [(1, "READY")]
    response = client.patch(f"/api/v1/model-versions/{version.pk}/", {"model_card": "# Card"}, format="json")
    assert response.status_code == 200, response.content
    version.refresh_from_db()
    assert version.model_card == "# Card"
    body = {"registered_model": version.registered_model_id, "alias": "production", "model_version": version.pk}
    response = client.post("/api/v1/model-aliases/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["version"] == 1
    assert client.get("/api/v1/model-versions/").json()["results"][0]["aliases"] == ["production"]
    assert user_client(world.charlie).post("/api/v1/model-aliases/", body, format="json").status_code in (400, 404)
