"""The model server's ONNX runtime (onnxruntime, in the train environment): a version the onnx-optimise template made
(an MLflow folder of flavour onnx) answers the Open Inference Protocol v2 as the scikit-learn model it came from does —
the same outputs by name, the same predictions, the feature names in its metadata, columns by name, 400s for bad input —
and deploys like any other version: "Deploy this version" names the framework after its files, and its replica runs
in the train environment and answers through the router."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from django.conf import settings

from apps.models import artifacts
from apps.models.registry import create_model_version
from apps.serving.models import Framework, InferenceService, Revision
from apps.serving.replicas import TRAIN_PYTHON, model_format, server_command
from apps.serving.router.asgi import invalidate
from apps.serving.services import deploy_version
from tests.factories import make_token, registered_model, tracking_run
from tests.jobs.conftest import onnx_python  # noqa: F401 (fixture: skips without the ONNX packages)
from tests.jobs.onnx_env import run_script
from tests.serving.factories import artifact_store, drive, fast_serving, svc_agent  # noqa: F401 (fixtures)
from tests.serving.test_modelserver import Server, outputs, tensor

pytestmark = pytest.mark.usefixtures("onnx_python")
FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> tuple[Path, dict]:
    """A logistic regression on iris, converted as the onnx-optimise template converts it into an MLflow folder of
    flavour onnx (its INT8 variant: a linear model's graph is the same), and what scikit-learn predicts."""
    root = tmp_path_factory.mktemp("onnx")
    found = run_script(
        settings.PORTAL_TASK_ENVS["train"],
        f"""
        import json
        from pathlib import Path
        from sklearn.datasets import load_iris
        from sklearn.linear_model import LogisticRegression
        from apps.jobs.builtin_tasks import _onnx
        from apps.jobs.builtin_tasks.onnx_optimise import mlflow_folder

        x, y = load_iris(return_X_y=True)
        estimator = LogisticRegression(max_iter=500).fit(x, y)
        root = Path({str(root)!r})
        source = _onnx.Source("sklearn", estimator, root / "model.pkl", features={FEATURES!r})
        _onnx.convert(source, x, root / "fp32.onnx")
        _onnx.quantise_int8(root / "fp32.onnx", root / "int8.onnx")
        mlflow_folder(root / "mlflow", root / "int8.onnx", source, "models:/iris/1", "int8")
        print(json.dumps({{"predict": estimator.predict(x).tolist(), "proba": estimator.predict_proba(x).tolist()}}))
        """,
    )
    return root / "mlflow" / "model", found


@pytest.fixture(scope="module")
def server(onnx_model) -> Iterator[Server]:
    srv = Server(onnx_model[0], python=settings.PORTAL_TASK_ENVS["train"])
    yield srv
    srv.stop()


def iris_x() -> np.ndarray:
    from sklearn.datasets import load_iris

    return load_iris().data


def test_it_predicts_what_the_scikit_learn_model_predicts(server, onnx_model):
    status, body = server.infer(
        {"id": "r1", "inputs": [tensor(iris_x())], "outputs": [{"name": "predict"}, {"name": "predict_proba"}]}
    )
    assert status == 200, body
    got = outputs(body)
    assert got["predict"].tolist() == onnx_model[1]["predict"]
    np.testing.assert_allclose(got["predict_proba"], onnx_model[1]["proba"], atol=1e-5)
    assert {o["name"]: o["datatype"] for o in body["outputs"]} == {"predict": "INT64", "predict_proba": "FP32"}
    assert "onnx" in server.banner


def test_metadata_names_the_runtime_the_features_and_the_outputs(server):
    status, meta = server.get("/v2/models/iris")
    assert status == 200
    assert meta["platform"] == "onnx"
    assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    specs = {o["name"]: o for o in meta["outputs"]}
    assert specs["predict"] == {"name": "predict", "datatype": "INT64", "shape": [-1]}
    assert specs["predict_proba"] == {"name": "predict_proba", "datatype": "FP32", "shape": [-1, 3]}
    assert meta["parameters"]["feature_names"] == FEATURES
    assert meta["parameters"]["metadata"]["optimisation"] == {
        "source": "models:/iris/1", "variant": "int8", "from_flavour": "sklearn"}  # fmt: skip


def test_it_explains_the_probabilities_per_row_additively(server):
    """Per-row SHAP values from the replica in the train environment (docs/explainability.md): the float scores, not
    the INT64 labels, with the graph's feature names; base value + contributions = the probabilities."""
    x = iris_x()
    status, body = server.request("POST", "/v2/models/iris/explain", {
        "inputs": [tensor(x[[0, 70]])], "parameters": {"background": x[::15].tolist()}})  # fmt: skip
    assert status == 200, body
    assert body["output"] == "predict_proba"
    assert body["feature_names"] == FEATURES
    assert body["predict"][0] == 0  # the labels predicted, beside the scores explained
    for row in body["rows"]:
        total = np.array(row["base_value"]) + np.array(row["contributions"]).sum(axis=0)
        np.testing.assert_allclose(total, row["output"], atol=1e-6)


def test_it_answers_predict_alone_unless_asked_and_takes_columns_by_name(server, onnx_model):
    x = iris_x()[:3]
    status, body = server.infer({"inputs": [tensor(x)]})
    assert status == 200
    assert [o["name"] for o in body["outputs"]] == ["predict"]
    columns = [tensor(x[:, i], name=name) for i, name in reversed(list(enumerate(FEATURES)))]
    status, body = server.infer({"inputs": columns})
    assert status == 200, body
    assert outputs(body)["predict"].tolist() == onnx_model[1]["predict"][:3]
    status, body = server.infer({"inputs": [tensor(x)]}, "/v2/models/iris/versions/1/infer")
    assert status == 200


def test_bad_input_is_400_and_it_keeps_serving(server, onnx_model):
    status, body = server.infer({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]})
    assert status == 400
    assert "3 features per row, the model takes 4" in body["error"]
    status, body = server.infer({"inputs": [tensor(iris_x()[:1])], "outputs": [{"name": "label"}]})
    assert status == 400
    assert "unknown output 'label'" in body["error"]
    status, body = server.infer({"inputs": [tensor(iris_x()[:1])]})
    assert status == 200
    assert outputs(body)["predict"].tolist() == onnx_model[1]["predict"][:1]


def test_a_revision_of_an_onnx_version_runs_in_the_train_environment_whatever_the_framework():
    config = {"framework": Framework.SKLEARN, "model_format": "onnx", "model_name": "m"}
    assert server_command(config, python="{python}", host="127.0.0.1", port=1, model_path="/m")[0] == TRAIN_PYTHON
    config["model_format"] = "sklearn"
    assert server_command(config, python="{python}", host="127.0.0.1", port=1, model_path="/m")[0] == "{python}"


def register_files(project, owner, folder: Path, name: str = "iris"):
    """A new version of `name` whose files are `folder`'s, under model/ of a fresh run."""
    run = tracking_run(project, owner, name=f"optimise-{time.monotonic_ns()}")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    for path in folder.iterdir():
        artifacts.save(f"{base}/model/{path.name}", io.BytesIO(path.read_bytes()))
    return create_model_version(registered_model(project, name), source=f"runs:/{run.run_uuid}/model", run=run)


@pytest.mark.django_db
@pytest.mark.usefixtures("artifact_store")
def test_the_format_of_a_version_comes_from_its_mlmodel(world, onnx_model):
    version = register_files(world.project_a, world.alice, onnx_model[0])
    assert model_format(version.source) == "onnx"
    mlmodel = json.loads((onnx_model[0] / "MLmodel").read_text())
    assert set(mlmodel["flavors"]) == {"onnx", "python_function"}


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("svc_agent")
def test_deploy_this_version_serves_the_onnx_version_through_the_router(world, live_asgi, onnx_model):
    version = register_files(world.project_a, world.alice, onnx_model[0])

    service, problem = deploy_version(world.project_a, world.alice, version, name="iris-onnx")

    assert problem == ""
    assert service.framework == Framework.ONNX  # named after the version's files
    service = drive(service, lambda s: s.status in (InferenceService.Status.READY, InferenceService.Status.FAILED),
                    timeout=180)  # fmt: skip
    assert service.status == InferenceService.Status.READY, service.reason
    revision = service.revisions.get()
    assert revision.status == Revision.Status.READY
    assert revision.config["model_format"] == "onnx"
    invalidate()
    headers = {"Authorization": f"Bearer {make_token(world.bob)}"}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=60) as bob:
        answer = bob.post("/serving/project-a/iris-onnx/v2/models/iris-onnx/infer",
                          json={"inputs": [tensor(iris_x()[:5])]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert outputs(answer.json())["predict"].tolist() == onnx_model[1]["predict"][:5]
