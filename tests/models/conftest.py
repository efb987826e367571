"""Fixtures of the tracking tests: a private artifact store, MLflow API clients, the official client."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from tests.factories import make_token

CLIENT_PYTHON = Path(settings.BASE_DIR) / ".venv-mlflow" / "bin" / "python"
OLDER_CLIENT_PYTHON = Path(settings.BASE_DIR) / ".venv-mlflow2" / "bin" / "python"  # the MLflow 2 line
CLIENTS = Path(__file__).parent / "clients"


@pytest.fixture(autouse=True)
def artifact_store(settings, tmp_path):
    """Each test its own artifact folder (experiment ids repeat across xdist workers' databases)."""
    location = tmp_path / "artifacts"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
    }
    return location


class MlflowApi:
    """Raw calls to the MLflow REST API through Django's test client, with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def post(self, endpoint: str, body: dict | str | None = None, method: str = "post"):
        data = body if isinstance(body, str) else json.dumps(body or {})
        return getattr(self.client, method)(
            f"/api/2.0/mlflow/{endpoint}", data=data, content_type="application/json", **self.headers
        )

    def get(self, endpoint: str, **params):
        return self.client.get(f"/api/2.0/mlflow/{endpoint}", params, **self.headers)

    def patch(self, endpoint: str, body: dict):
        return self.post(endpoint, body, method="patch")

    def delete(self, endpoint: str, body: dict):
        return self.post(endpoint, body, method="delete")

    def put_artifact(self, path: str, content: bytes):
        return self.client.put(
            f"/api/2.0/mlflow-artifacts/artifacts/{path}", data=content,
            content_type="application/octet-stream", **self.headers,
        )  # fmt: skip

    def get_artifact(self, artifact: str, **params):
        return self.client.get(f"/api/2.0/mlflow-artifacts/artifacts/{artifact}".rstrip("/"), params, **self.headers)

    def delete_artifact(self, path: str):
        return self.client.delete(f"/api/2.0/mlflow-artifacts/artifacts/{path}", **self.headers)

    # Shortcuts that assert success
    def experiment(self, name: str) -> str:
        response = self.post("experiments/create", {"name": name})
        assert response.status_code == 200, response.content
        return response.json()["experiment_id"]

    def run(self, experiment_id: str, **fields) -> dict:
        response = self.post("runs/create", {"experiment_id": experiment_id, "start_time": 1, **fields})
        assert response.status_code == 200, response.content
        return response.json()["run"]


def api_for(user, **token_kwargs) -> MlflowApi:
    return MlflowApi(make_token(user, **token_kwargs))


@pytest.fixture
def api_a(world) -> MlflowApi:
    """Alice's token limited to project A."""
    return api_for(world.alice, project=world.project_a)


@pytest.fixture
def api_b(world) -> MlflowApi:
    """Charlie's token limited to project B."""
    return api_for(world.charlie, project=world.project_b)


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == code, body
    return body


def run_client(
    script: str, server_url: str, token: str, *args: str, timeout: int = 300, python: Path = CLIENT_PYTHON
) -> dict:
    """Run a script of tests/models/clients with the official mlflow client; returns its JSON output."""
    if not python.exists():
        target = "mlflow2-env" if python == OLDER_CLIENT_PYTHON else "mlflow-env"
        pytest.skip(f"the official client's venv is missing: run `make {target}`")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_"))},
        "MLFLOW_TRACKING_URI": server_url,
        "MLFLOW_TRACKING_TOKEN": token,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "GIT_PYTHON_REFRESH": "quiet",
        "PYTHONUNBUFFERED": "1",
    }
    result = subprocess.run(
        [str(python), str(CLIENTS / script), *args],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=str(CLIENTS),
    )  # fmt: skip
    assert result.returncode == 0, f"{script} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])
