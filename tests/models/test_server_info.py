"""GET /api/3.0/mlflow/server-info: the capability probe of MLflow 3 clients (artifact multipart, workspaces,
telemetry), answered as MLflow 3.17's server does — without login, since clients ask before they authenticate —
with what this server supports."""

from __future__ import annotations

import pytest

EXPECTED = {
    "store_type": None,  # neither MLflow's FileStore nor its SqlStore
    "workspaces_enabled": False,
    "trace_archival_enabled": False,
    "multipart_uploads_enabled": False,  # mlflow-artifacts/mpu is not implemented: the client uploads in one PUT
    "multipart_downloads_enabled": False,
    "presigned_upload_run_id_supported": False,
    "presigned_upload_model_id_supported": False,
    "features_enabled": {"gateway": False},
}


@pytest.mark.smoke
@pytest.mark.parametrize("prefix", ["api", "ajax-api"])
def test_it_answers_the_capabilities_without_login(client, db, prefix):
    response = client.get(f"/{prefix}/3.0/mlflow/server-info")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == EXPECTED


def test_it_answers_a_signed_request_the_same_and_only_reads(client, world):
    from tests.factories import make_token

    token = make_token(world.alice, project=world.project_a)
    response = client.get("/api/3.0/mlflow/server-info", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.json() == EXPECTED
    assert client.head("/api/3.0/mlflow/server-info").status_code == 200
    refused = client.post("/api/3.0/mlflow/server-info", {})
    assert refused.status_code == 405
    assert refused["Allow"] == "GET, HEAD, OPTIONS"
