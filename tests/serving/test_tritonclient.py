"""NVIDIA's `tritonclient[http]` as a real client of the model server and of the router: JSON tensors and the
binary tensor data extension (raw bytes after a JSON header of `Inference-Header-Content-Length` bytes), inputs
and outputs, numbers and BYTES; malformed binary requests answered 400 with the reason."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from http.client import HTTPConnection

import joblib
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder
from tritonclient.utils import InferenceServerException

from tests.factories import make_token
from tests.serving import replicas as replica_fixtures
from tests.serving.replicas import ModelServer, add_revision, make_service

iris_path = replica_fixtures.iris_path
replicas = replica_fixtures.replicas

ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]])


@pytest.fixture(scope="module")
def estimator() -> LogisticRegression:
    return LogisticRegression(max_iter=1000).fit(*load_iris(return_X_y=True))


@pytest.fixture(scope="module")
def iris_server(replicas) -> ModelServer:
    return replicas[0]


@pytest.fixture(scope="module")
def string_server(tmp_path_factory) -> Iterator[ModelServer]:
    """A model on strings answering string labels (BYTES in and out): an MLflow Model folder whose tensor
    signature declares string input."""
    x = np.array([["red"], ["green"], ["blue"], ["red"]], dtype=object)
    y = np.array(["warm", "cold", "cold", "warm"], dtype=object)
    folder = tmp_path_factory.mktemp("colours")
    joblib.dump(make_pipeline(OneHotEncoder(), LogisticRegression()).fit(x, y), folder / "model.pkl")
    spec = orjson.dumps([{"type": "tensor", "tensor-spec": {"dtype": "str", "shape": [-1, 1]}}]).decode()
    (folder / "MLmodel").write_text(
        "flavors:\n  sklearn:\n    pickled_model: model.pkl\n    serialization_format: pickle\n"
        f"signature:\n  inputs: '{spec}'\n"
    )
    server = ModelServer(folder, name="colours").start()
    yield server
    server.stop()


def client_for(server: ModelServer) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


def iris_inputs(binary: bool, rows: np.ndarray = ROWS) -> list[triton.InferInput]:
    tensor = triton.InferInput("input-0", list(rows.shape), "FP64")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    return [tensor]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_round_trips_against_the_model_server(iris_server, estimator, binary):
    client = client_for(iris_server)
    outputs = [triton.InferRequestedOutput(name, binary_data=binary) for name in ("predict", "predict_proba")]

    result = client.infer("iris", iris_inputs(binary), outputs=outputs, request_id="r1")

    assert client.is_server_live()
    assert client.is_model_ready("iris")
    assert result.get_response()["id"] == "r1"
    np.testing.assert_array_equal(result.as_numpy("predict"), estimator.predict(ROWS))
    np.testing.assert_allclose(result.as_numpy("predict_proba"), estimator.predict_proba(ROWS), rtol=1e-12)
    sizes = [o.get("parameters", {}).get("binary_data_size") for o in result.get_response()["outputs"]]
    assert sizes == ([3 * 8, 3 * 3 * 8] if binary else [None, None])


def test_without_outputs_tritonclient_asks_for_binary_defaults(iris_server, estimator):
    """tritonclient's default: binary inputs, and the request parameter binary_data_output when it names no
    outputs."""
    result = client_for(iris_server).infer("iris", iris_inputs(True))

    [output] = result.get_response()["outputs"]
    assert output["name"] == "predict"
    assert output["parameters"] == {"binary_data_size": 24}
    np.testing.assert_array_equal(result.as_numpy("predict"), estimator.predict(ROWS))


def test_json_and_binary_outputs_mix_in_one_answer(iris_server, estimator):
    outputs = [triton.InferRequestedOutput("predict", binary_data=False), triton.InferRequestedOutput("predict_proba")]

    result = client_for(iris_server).infer("iris", iris_inputs(True), outputs=outputs)

    first, second = result.get_response()["outputs"]
    assert first["data"] == estimator.predict(ROWS).tolist()
    assert "parameters" not in first
    assert second["parameters"] == {"binary_data_size": 72}
    assert "data" not in second
    np.testing.assert_allclose(result.as_numpy("predict_proba"), estimator.predict_proba(ROWS), rtol=1e-12)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_bytes_tensors_round_trip(string_server, binary):
    colours = np.array([["blue"], ["red"]], dtype=object)
    tensor = triton.InferInput("input-0", [2, 1], "BYTES")
    tensor.set_data_from_numpy(colours, binary_data=binary)
    output = triton.InferRequestedOutput("predict", binary_data=binary)

    result = client_for(string_server).infer("colours", [tensor], outputs=[output])

    assert result.get_response()["outputs"][0]["datatype"] == "BYTES"
    # tritonclient gives str from JSON and bytes from binary data, as it does against Triton
    assert result.as_numpy("predict").tolist() == ([b"cold", b"warm"] if binary else ["cold", "warm"])


def test_a_compressed_body_is_refused_saying_so(iris_server):
    client = client_for(iris_server)
    with pytest.raises(InferenceServerException, match="compressed request bodies are not taken") as exc:
        client.infer("iris", iris_inputs(True), request_compression_algorithm="gzip")
    assert exc.value.status() == "415"
    assert client.is_server_ready()


def test_server_metadata_names_the_binary_extension(iris_server):
    metadata = client_for(iris_server).get_server_metadata()
    assert "binary_tensor_data" in metadata["extensions"]


def post(server: ModelServer, body: bytes, header_length: int | str | None) -> tuple[int, dict]:
    host, port = server.url.removeprefix("http://").split(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    headers = {"Content-Type": "application/octet-stream"}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(header_length)
    try:
        conn.request("POST", "/v2/models/iris/infer", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        conn.close()


def binary_body(rows: np.ndarray, size: int | None = None, datatype: str = "FP64", cut: int = 0) -> tuple[bytes, int]:
    """A binary request for `rows` as FP64 (`size`: the binary_data_size it declares; `cut`: bytes left off)."""
    raw = rows.astype("<f8").tobytes()[: -cut or None]
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input-0",
                    "shape": list(rows.shape),
                    "datatype": datatype,
                    "parameters": {"binary_data_size": len(raw) if size is None else size},
                }
            ]
        }
    )
    return header + raw, len(header)


def test_malformed_binary_requests_are_400_with_the_reason(iris_server, estimator):
    body, length = binary_body(ROWS)
    cases = [
        ((body, None), "the body is not valid JSON"),  # binary data without the header
        ((body, length + 10_000), f"Inference-Header-Content-Length is {length + 10_000}"),
        ((body, "many"), "Inference-Header-Content-Length must be a byte count"),
        ((body[:-8], length), "binary_data_size is 96, but 88 bytes of binary data are left"),
        (binary_body(ROWS, size=88, cut=8), "shape needs 12 FP64 values (96 bytes), but binary_data_size is 88"),
        ((body + b"\0" * 8, length), "add up to 96 bytes, but 104 follow the JSON header"),
        (binary_body(ROWS, size=200), "binary_data_size is 200, but 96 bytes of binary data are left"),
        (binary_body(ROWS, datatype="FP32"), "shape needs 12 FP32 values (48 bytes)"),
        ((body[:length], length), "binary_data_size is 96, but 0 bytes of binary data are left"),
    ]
    nan_body, nan_length = binary_body(np.array([[np.nan, 1.0, 2.0, 3.0]]))
    cases.append(((nan_body, nan_length), "values must be finite"))
    for (raw, header_length), message in cases:
        status, answer = post(iris_server, raw, header_length)
        assert status == 400, (message, answer)
        assert message in answer["error"]

    status, answer = post(iris_server, body, length)  # and it keeps serving
    assert status == 200
    assert answer["outputs"][0]["data"] == estimator.predict(ROWS).tolist()


def test_binary_bytes_elements_must_be_whole(string_server):
    header = orjson.dumps(
        {"inputs": [{"name": "input-0", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]}
    )
    host, port = string_server.url.removeprefix("http://").split(":")
    conn = HTTPConnection(host, int(port), timeout=30)
    body = header + struct.pack("<I", 10) + b"re"  # says 10 bytes, holds 2
    conn.request(
        "POST", "/v2/models/colours/infer", body=body, headers={"Inference-Header-Content-Length": str(len(header))}
    )
    response = conn.getresponse()
    assert response.status == 400
    assert "a BYTES element of 10 bytes runs past binary_data_size" in orjson.loads(response.read())["error"]


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_round_trips_through_the_router(world, live_asgi, replicas, estimator, binary):
    service = make_service(world.project_a)
    service.current_revision = add_revision(service, 1, replicas[0])
    service.save()
    token = make_token(world.alice)
    url = live_asgi.url.removeprefix("http://") + "/serving/project-a/iris"
    client = triton.InferenceServerClient(url)
    headers = {"Authorization": f"Bearer {token}"}
    outputs = [triton.InferRequestedOutput(name, binary_data=binary) for name in ("predict", "predict_proba")]

    assert client.is_server_ready(headers=headers)
    assert client.is_model_ready("iris", headers=headers)
    metadata = client.get_model_metadata("iris", headers=headers)
    result = client.infer("iris", iris_inputs(binary), outputs=outputs, headers=headers)

    assert metadata["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
    np.testing.assert_array_equal(result.as_numpy("predict"), estimator.predict(ROWS))
    np.testing.assert_allclose(result.as_numpy("predict_proba"), estimator.predict_proba(ROWS), rtol=1e-12)
    with pytest.raises(InferenceServerException, match="Authentication required"):
        client.infer("iris", iris_inputs(binary), outputs=outputs)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_router_forwards_a_large_binary_tensor(world, live_asgi, replicas, estimator):
    """Many rows in one binary request (past the router's single-write threshold) come back whole."""
    service = make_service(world.project_a)
    service.current_revision = add_revision(service, 1, replicas[1])
    service.save()
    rows = np.tile(ROWS, (4000, 1))  # 12,000 rows: 384 kB of FP64
    client = triton.InferenceServerClient(live_asgi.url.removeprefix("http://") + "/serving/project-a/iris")
    headers = {"Authorization": f"Bearer {make_token(world.alice)}"}

    result = client.infer("iris", iris_inputs(True, rows), headers=headers)

    np.testing.assert_array_equal(result.as_numpy("predict"), estimator.predict(rows))
