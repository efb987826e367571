"""What the model server loads: the sklearn-train template's output, MLflow models (the portal's own MLmodel
and the official client's save_model in every serialization format), and clear start-up failures for
models it cannot serve. Also the listening socket (TCP_NODELAY on accepted connections)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

from apps.serving.modelserver.__main__ import EXIT_LOAD_FAILED, bind
from apps.serving.modelserver.loading import LoadError, load
from tests.serving.test_modelserver import ROOT, Server, outputs, tensor

MLFLOW_PYTHON = ROOT / ".venv-mlflow" / "bin" / "python"
FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    return load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def template_output(tmp_path_factory) -> Path:
    """What the built-in iris_load → sklearn_train nodes leave in the train node's output folder."""
    from apps.jobs.builtin_tasks import iris_load, sklearn_train

    data, out = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PORTAL_OUTPUT_DIR", str(data))
        assert iris_load.main([]) == 0
        mp.setenv("PORTAL_OUTPUT_DIR", str(out))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert sklearn_train.main(["--input", str(data / "data.csv")]) == 0
    assert (out / "model.joblib").is_file()
    return out


def test_it_serves_the_sklearn_train_template_output(template_output, iris):
    estimator = joblib.load(template_output / "model.joblib")
    features = json.loads((template_output / "params.json").read_text())["features"]
    srv = Server(template_output)  # the folder: model.joblib is found, params.json names the features
    try:
        status, meta = srv.get("/v2/models/iris")
        assert meta["parameters"]["feature_names"] == features
        assert {o["name"]: o["datatype"] for o in meta["outputs"]}["predict"] == "BYTES"
        status, body = srv.infer({"inputs": [tensor(iris[0][[0, 60, 120]])]})
        assert status == 200, body
        assert outputs(body)["predict"].tolist() == estimator.predict(iris[0][[0, 60, 120]]).tolist()
        assert body["outputs"][0]["datatype"] == "BYTES"
        # one input per column, named by feature and sent in another order: put back in the model's order
        columns = [
            {
                "name": name,
                "shape": [3],
                "datatype": "FP64",
                "data": iris[0][[0, 60, 120], features.index(name)].tolist(),
            }
            for name in reversed(features)
        ]
        status, body = srv.infer({"inputs": columns})
        assert status == 200, body
        assert outputs(body)["predict"].tolist() == estimator.predict(iris[0][[0, 60, 120]]).tolist()
    finally:
        srv.stop()


def test_it_loads_the_mlflow_model_the_template_writes(template_output, tmp_path, iris):
    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    estimator = joblib.load(template_output / "model.joblib")
    folder = mlflow_model_dir(estimator, tmp_path)
    predictor = load(tmp_path)  # the folder above: finds model/MLmodel
    assert predictor.platform == "sklearn"
    assert predictor.parameters["source"] == "mlflow"
    assert load(folder).run(iris[0][:5], ("predict",))["predict"].tolist() == estimator.predict(iris[0][:5]).tolist()
    assert predictor.feature_names is None  # no columns given: no signature


def test_the_template_names_its_training_columns_in_a_signature(template_output, tmp_path):
    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    estimator = joblib.load(template_output / "model.joblib")
    columns = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    predictor = load(mlflow_model_dir(estimator, tmp_path, columns))
    assert predictor.feature_names == columns
    assert (predictor.input.datatype, predictor.input.shape) == ("FP64", (-1, 4))


SAVE_WITH_MLFLOW = textwrap.dedent(
    """
    import json, sys
    import mlflow.sklearn, pandas as pd
    from mlflow.models import infer_signature
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    out = sys.argv[1]
    x, y = load_iris(return_X_y=True)
    frame = pd.DataFrame(x, columns=FEATURES)
    model = LogisticRegression(max_iter=500).fit(frame, y)
    mlflow.sklearn.save_model(model, f"{out}/skops", signature=infer_signature(frame, model.predict(frame)))
    mlflow.sklearn.save_model(model, f"{out}/cloudpickle", serialization_format="cloudpickle")
    mlflow.sklearn.save_model(model, f"{out}/pickle", serialization_format="pickle")
    json.dump({"predict": model.predict(frame).tolist(), "proba": model.predict_proba(frame).tolist()},
              open(f"{out}/expected.json", "w"))
    """
).replace("FEATURES", repr(FEATURES))


@pytest.fixture(scope="module")
def mlflow_models(tmp_path_factory) -> Path:
    if not MLFLOW_PYTHON.exists():
        pytest.skip("needs .venv-mlflow (make mlflow-env)")
    out = tmp_path_factory.mktemp("mlflow")
    script = out / "save.py"
    script.write_text(SAVE_WITH_MLFLOW)
    subprocess.run([str(MLFLOW_PYTHON), str(script), str(out)], check=True, capture_output=True, timeout=300)
    return out


def test_it_serves_a_model_saved_by_mlflow(mlflow_models, iris):
    expected = json.loads((mlflow_models / "expected.json").read_text())
    assert "serialization_format: skops" in (mlflow_models / "skops" / "MLmodel").read_text()  # MLflow 3's default
    srv = Server(mlflow_models / "skops")
    try:
        status, meta = srv.get("/v2/models/iris")
        assert meta["platform"] == "sklearn"
        assert meta["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
        assert meta["parameters"]["feature_names"] == FEATURES  # from the MLmodel signature
        status, body = srv.infer(
            {"inputs": [tensor(iris[0])], "outputs": [{"name": "predict"}, {"name": "predict_proba"}]}
        )
        assert status == 200, body
        assert outputs(body)["predict"].tolist() == expected["predict"]
        np.testing.assert_allclose(outputs(body)["predict_proba"], expected["proba"], rtol=1e-12)
    finally:
        srv.stop()


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
@pytest.mark.parametrize("fmt", ["cloudpickle", "pickle"])
def test_it_loads_every_mlflow_serialization_format(mlflow_models, iris, fmt):
    expected = json.loads((mlflow_models / "expected.json").read_text())
    assert f"serialization_format: {fmt}" in (mlflow_models / fmt / "MLmodel").read_text()
    predictor = load(mlflow_models / fmt)
    assert predictor.feature_names == FEATURES  # fitted on a DataFrame: feature_names_in_
    assert predictor.run(iris[0], ("predict",))["predict"].tolist() == expected["predict"]


def start_failure(model: Path | str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "apps.serving.modelserver", "--name", "m", "--model", str(model), "--port", "0"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_model_that_cannot_load_stops_the_server_with_the_reason(tmp_path):
    result = start_failure(tmp_path / "nothing-here")
    assert result.returncode == EXIT_LOAD_FAILED
    assert f"no model at {tmp_path / 'nothing-here'}" in result.stderr
    assert result.stdout == ""  # never listened


XGBOOST_MLMODEL = b"flavors:\n  xgboost:\n    data: model.xgb\n    model_class: xgboost.XGBClassifier\n"


@pytest.mark.parametrize(
    ("package", "layout"),
    [
        ("onnxruntime", {"model.onnx": b"not really onnx"}),
        ("xgboost", {"MLmodel": XGBOOST_MLMODEL}),
        ("torch", {"model.pt": b"not really torch"}),
    ],
)  # fmt: skip
def test_a_framework_that_is_not_installed_is_named(tmp_path, package, layout):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    for name, content in layout.items():
        (tmp_path / name).write_bytes(content)
    result = start_failure(tmp_path)
    assert result.returncode == EXIT_LOAD_FAILED
    assert f"needs the Python package '{package}', which is not installed in this environment" in result.stderr


def test_a_pickle_of_a_missing_package_names_it(tmp_path):
    # A pickle referring to a module this environment lacks (as an xgboost or lightgbm pickle would).
    (tmp_path / "model.pkl").write_bytes(b"cmissing_pkg_abc\nModel\n.")  # protocol 0: GLOBAL, STOP
    with pytest.raises(LoadError, match="needs the Python package 'missing_pkg_abc'"):
        load(tmp_path / "model.pkl")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "holds no model"),
        ({"a.joblib": b"x", "b.pkl": b"x"}, "holds several model files (a.joblib, b.pkl)"),
        ({"model.txt": b"x"}, "holds no model"),
        ({"MLmodel": b"flavors:\n  python_function:\n    loader_module: mlflow.pyfunc.model\n"},
         "the model server loads sklearn, xgboost, onnx and pytorch models"),
        ({"MLmodel": b"flavors: [unclosed"}, "is not a readable MLmodel file"),
        ({"model.joblib": b"garbage"}, "could not be unpickled"),
    ],
)  # fmt: skip
def test_unservable_folders_say_why(tmp_path, files, message):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    with pytest.raises(LoadError) as info:
        load(tmp_path)
    assert message in str(info.value)


def test_a_model_without_predict_is_refused(tmp_path):
    joblib.dump({"weights": [1, 2]}, tmp_path / "model.joblib")
    with pytest.raises(LoadError, match="is a dict, which has no predict method"):
        load(tmp_path / "model.joblib")


def test_a_folder_holding_one_model_file_is_enough(tmp_path, iris):
    estimator = LogisticRegression(max_iter=500).fit(*iris)
    joblib.dump(estimator, tmp_path / "classifier.pkl")
    shutil.copy(tmp_path / "classifier.pkl", tmp_path / "copy.bin")  # not a model suffix: ignored
    predictor = load(tmp_path)
    assert predictor.input.shape == (-1, 4)
    assert predictor.run(iris[0][:3], ("predict",))["predict"].tolist() == estimator.predict(iris[0][:3]).tolist()


def test_accepted_connections_have_nagle_off():
    """The listener is bound with proto=IPPROTO_TCP so that the event loop sets TCP_NODELAY on each accepted
    connection (without it every keep-alive response waits ~40 ms for a delayed ACK: uvicorn#3149)."""

    async def accepted_nodelay() -> int:
        sock = bind("127.0.0.1", 0)
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted = transport.get_extra_info("socket")
                seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            client.close()
            server.close()

    import uvloop

    assert asyncio.run(accepted_nodelay()) == 1
    assert uvloop.run(accepted_nodelay()) == 1


TEXTS = ["a great film, loved it", "dull and far too long", "loved the cast, great fun", "a dull, boring plot"]


def test_a_text_model_takes_strings_by_its_signature(tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    estimator = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(TEXTS, ["pos", "neg", "pos", "neg"])
    predictor = load(mlflow_model_dir(estimator, tmp_path, text="text"))
    assert (predictor.input.name, predictor.input.datatype, predictor.input.shape) == ("text", "BYTES", (-1,))
    predictor.probe(2)  # empty strings, not zeros: the vectoriser takes them
    assert predictor.outputs["predict"].datatype == "BYTES"
    srv = Server(tmp_path)
    try:
        status, meta = srv.get("/v2/models/iris")  # the name the test server serves under
        assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
        request = {"name": "text", "shape": [2], "datatype": "BYTES", "data": ["great fun, loved it", "so dull"]}
        status, body = srv.infer({"inputs": [request]})
        assert status == 200, body
        assert outputs(body)["predict"].tolist() == ["pos", "neg"]
        status, body = srv.infer({"inputs": [{"name": "text", "shape": [1], "datatype": "FP64", "data": [1.0]}]})
        assert status == 400, body
        assert "cannot feed the model's BYTES input" in body["error"]
    finally:
        srv.stop()
