""" "Deploy this version" to a new service defaults the service's framework to what the version's files are (its
MLflow flavours, its model file, a Hugging Face folder or adapter), not to scikit-learn whatever they are: the page
shows the framework chosen, and the person may pick another."""

from __future__ import annotations

import io
import time

import pytest
from django.urls import reverse

from apps.models import artifacts
from apps.models.registry import create_model_version
from apps.serving.models import InferenceService
from tests.factories import registered_model, tracking_run
from tests.serving.factories import artifact_store, heartbeat_agent  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("artifact_store")]

PYFUNC = b"flavors:\n  python_function:\n    loader_module: mlflow.transformers\n  transformers:\n    task: text\n"
SKLEARN = b"flavors:\n  python_function:\n    loader_module: mlflow.sklearn\n  sklearn:\n    pickled_model: m.pkl\n"
LOADER_ONLY = b"flavors:\n  python_function:\n    loader_module: mlflow.onnx\n    data: model.onnx\n"


def version_of(world, files: dict[str, bytes]):
    """A version of "m" whose folder `model/` holds `files`."""
    run = tracking_run(world.project_a, world.alice, name=f"train-{time.monotonic_ns()}")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    for path, content in files.items():
        artifacts.save(f"{base}/model/{path}", io.BytesIO(content))
    return create_model_version(registered_model(world.project_a, "m"), source=f"runs:/{run.run_uuid}/model", run=run)


def deploy_url(version) -> str:
    return reverse("serving:version-deploy", kwargs={"project": "project-a", "pk": version.pk})


@pytest.mark.parametrize(
    ("files", "framework"),
    [
        ({"model.joblib": b"x", "params.json": b"{}"}, "sklearn"),
        ({"MLmodel": SKLEARN, "m.pkl": b"x"}, "sklearn"),
        ({"model.onnx": b"x"}, "onnx"),
        ({"model.pt": b"x"}, "pytorch"),
        ({"MLmodel": LOADER_ONLY, "model.onnx": b"x"}, "onnx"),
        ({"MLmodel": PYFUNC}, "mlflow"),
        ({"config.json": b"{}", "model.safetensors": b"x", "tokenizer.json": b"{}"}, "llm"),
        ({"adapter_config.json": b"{}", "adapter_model.safetensors": b"x"}, "llm"),
        ({"model.gguf": b"x"}, "llm"),
    ],
)
def test_a_new_service_gets_the_framework_of_the_versions_files(client, world, files, framework):
    heartbeat_agent()
    version = version_of(world, files)
    client.force_login(world.bob)

    html = client.get(deploy_url(version)).content.decode()
    client.post(deploy_url(version), {"name": "m-api"})

    assert f'<option value="{framework}" selected>' in html
    assert InferenceService.objects.get(name="m-api").framework == framework


def test_the_person_may_pick_another_framework_and_a_bad_one_is_a_400(client, world):
    heartbeat_agent()
    version = version_of(world, {"model.onnx": b"x"})
    client.force_login(world.bob)

    bad = client.post(deploy_url(version), {"name": "m-api", "framework": "cobol"})
    client.post(deploy_url(version), {"name": "m-api", "framework": "mlflow"})

    assert bad.status_code == 400
    assert "Choose one of" in bad.content.decode()
    assert InferenceService.objects.get(name="m-api").framework == "mlflow"
