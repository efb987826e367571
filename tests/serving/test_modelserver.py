"""The model server as a real process: Open Inference Protocol v2 endpoints, predictions equal to the model's
own, every kind of bad input answered 400 while the server keeps serving, and adaptive batching."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder

from tests.serving.heldworker import HOLD_ENV, held_in_all_workers_but_one

ROOT = Path(__file__).resolve().parents[2]
FEATURES = ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]


class Server:
    """A model-server subprocess on a free port (--port 0: it prints the port it got)."""

    def __init__(
        self,
        model: Path,
        *args: str,
        port: int = 0,
        env: dict | None = None,
        banner: bool = True,
        python: str = sys.executable,
    ) -> None:
        # `python`: another environment's interpreter (the train environment's, which has onnxruntime and torch)
        command = [python, "-m", "apps.serving.modelserver", "--name", "iris", "--model", str(model)]
        # stderr to a file: a pipe nobody reads could fill up and block the server (closed by stop())
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*command, "--port", str(port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.port = port
        if banner:
            self.read_banner()
            self.wait_ready()

    def banner_came(self, timeout: float = 0) -> bool:
        return bool(select.select([self.proc.stdout], [], [], timeout)[0])

    def read_banner(self) -> None:
        line = self.proc.stdout.readline()  # the banner: the only line it prints on stdout
        if "http://" not in line:
            self.proc.kill()
            self.proc.wait()
            self.log.seek(0)
            raise RuntimeError(f"the model server did not start: {line}{self.log.read().decode()}")
        self.banner = line
        self.port = int(line.split("http://", 1)[1].split()[0].rsplit(":", 1)[1])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.get("/v2/health/ready")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the model server never became ready")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
            kind = response.getheader("content-type", "")
            return response.status, json.loads(raw) if kind.startswith("application/json") else raw.decode()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def infer(self, body: Any, path: str = "/v2/models/iris/infer") -> tuple[int, Any]:
        return self.request("POST", path, body)

    def metric(self, name: str) -> float:
        text = self.get("/metrics")[1]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stdout.close()
        self.log.close()


def tensor(rows: Any, datatype: str = "FP64", name: str = "input-0", shape: list[int] | None = None) -> dict:
    rows = np.asarray(rows)
    return {"name": name, "shape": shape or list(rows.shape), "datatype": datatype, "data": rows.tolist()}


def outputs(response: dict) -> dict[str, np.ndarray]:
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in response["outputs"]}


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_iris(return_X_y=True)
    return x, y


@pytest.fixture(scope="module")
def model(iris, tmp_path_factory) -> tuple[LogisticRegression, Path]:
    estimator = LogisticRegression(max_iter=500).fit(*iris)
    path = tmp_path_factory.mktemp("model") / "model.joblib"
    joblib.dump(estimator, path)
    return estimator, path


@pytest.fixture(scope="module")
def server(model) -> Iterator[Server]:
    srv = Server(model[1])
    yield srv
    srv.stop()


def test_it_predicts_what_sklearn_predicts(server, model, iris):
    estimator, x = model[0], iris[0]
    status, body = server.infer(
        {"id": "req-1", "inputs": [tensor(x)], "outputs": [{"name": "predict"}, {"name": "predict_proba"}]}
    )
    assert status == 200, body
    assert body["id"] == "req-1"
    assert (body["model_name"], body["model_version"]) == ("iris", "1")
    got = outputs(body)
    assert got["predict"].tolist() == estimator.predict(x).tolist()
    np.testing.assert_allclose(got["predict_proba"], estimator.predict_proba(x), rtol=1e-12)
    assert {o["name"]: o["datatype"] for o in body["outputs"]} == {"predict": "INT64", "predict_proba": "FP64"}


def test_it_takes_flat_nested_and_one_row_vectors(server, model, iris):
    row = iris[0][100]
    expected = model[0].predict([row]).tolist()
    flat = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": row.tolist()}
    nested = {"name": "x", "shape": [1, 4], "datatype": "FP64", "data": [row.tolist()]}
    vector = {"name": "x", "shape": [4], "datatype": "FP64", "data": row.tolist()}
    for inp in (flat, nested, vector):
        status, body = server.infer({"inputs": [inp]})
        assert status == 200, body
        assert outputs(body)["predict"].tolist() == expected
        assert "id" not in body


def test_it_answers_only_the_default_output_unless_asked(server, iris):
    status, body = server.infer({"inputs": [tensor(iris[0][:2])]})
    assert status == 200
    assert [o["name"] for o in body["outputs"]] == ["predict"]
    status, body = server.infer({"inputs": [tensor(iris[0][:2])], "outputs": [{"name": "predict_proba"}]})
    assert [o["name"] for o in body["outputs"]] == ["predict_proba"]
    assert body["outputs"][0]["shape"] == [2, 3]


def test_metadata_describes_the_model(server):
    status, meta = server.get("/v2/models/iris")
    assert status == 200
    assert meta["name"] == "iris"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "sklearn"
    assert meta["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
    specs = {o["name"]: o for o in meta["outputs"]}
    assert specs["predict"] == {"name": "predict", "datatype": "INT64", "shape": [-1]}
    assert specs["predict_proba"] == {"name": "predict_proba", "datatype": "FP64", "shape": [-1, 3]}
    assert meta["parameters"]["classes"] == [0, 1, 2]
    assert meta["parameters"]["max_batch_size"] == 32
    assert server.get("/v2/models/iris/versions/1") == (200, meta)


def test_health_and_readiness(server):
    assert server.get("/v2/health/live") == (200, {"live": True})
    assert server.get("/v2/health/ready") == (200, {"ready": True})
    assert server.get("/v2/models/iris/ready") == (200, {"name": "iris", "ready": True})
    assert server.get("/v2/models/iris/versions/1/ready")[0] == 200
    status, meta = server.get("/v2")
    assert status == 200
    assert meta["name"] == "portal-modelserver"


def test_the_versioned_infer_path_answers(server, iris):
    status, body = server.infer({"inputs": [tensor(iris[0][:1])]}, "/v2/models/iris/versions/1/infer")
    assert status == 200
    assert outputs(body)["predict"].tolist() == [0]


@pytest.mark.parametrize(
    ("path", "method", "status", "message"),
    [
        ("/v2/models/nope/infer", "POST", 404, "unknown model 'nope'"),
        ("/v2/models/nope", "GET", 404, "unknown model 'nope'"),
        ("/v2/models/nope/ready", "GET", 404, "unknown model 'nope'"),
        ("/v2/models/iris/versions/2/infer", "POST", 404, "has no version '2'"),
        ("/v2/models/iris/versions/2", "GET", 404, "has no version '2'"),
        ("/v2/models/iris/generate", "POST", 404, "no such endpoint"),
        ("/v2/models/iris/explain", "GET", 405, "use POST"),
        ("/v1/models/iris:predict", "POST", 404, "no such endpoint"),
        ("/v2/models/iris/infer", "GET", 405, "use POST"),
        ("/v2/models/iris", "POST", 405, "use GET"),
    ],
)
def test_unknown_models_and_endpoints(server, iris, path, method, status, message):
    got_status, body = server.request(method, path, {"inputs": [tensor(iris[0][:1])]})
    assert got_status == status
    assert message in body["error"]


ROW = [5.1, 3.5, 1.4, 0.2]
BAD_INPUTS = {
    "shape and data disagree": (
        {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP64", "data": ROW}]},
        "shape [2, 4] needs 8 values, but data holds 4",
    ),
    "unknown datatype": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FLOAT", "data": ROW}]},
        "unknown datatype 'FLOAT'",
    ),
    "not convertible": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64", "data": ["a", "b", "c", "d"]}]},
        "not convertible to FP64",
    ),
    "wrong feature count": (
        {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": ROW[:3]}]},
        "3 features per row, the model takes 4",
    ),
    "bytes for a numeric model": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "BYTES", "data": ["a", "b", "c", "d"]}]},
        "datatype BYTES cannot feed the model's FP64 input",
    ),
    "ragged data": (
        {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP64", "data": [ROW, [1.0, 2.0]]}]},
        "ragged",
    ),
    "fractions for an integer datatype": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT64", "data": ROW}]},
        "datatype INT64 but data holds non-integer numbers",
    ),
    "out of range": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT8", "data": [1, 2, 3, 300]}]},
        "out of the range of INT8",
    ),
    "negative shape": (
        {"inputs": [{"name": "x", "shape": [-1, 4], "datatype": "FP64", "data": ROW}]},
        "'shape' must be a list of non-negative integers",
    ),
    "no rows": ({"inputs": [{"name": "x", "shape": [0, 4], "datatype": "FP64", "data": []}]}, "no rows"),
    "three dimensions": (
        {"inputs": [{"name": "x", "shape": [1, 1, 4], "datatype": "FP64", "data": ROW}]},
        "shape [1, 1, 4], but the model takes [rows, 4]",
    ),
    "missing data": ({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64"}]}, "'data' is missing"),
    "missing inputs": ({"id": "x"}, "'inputs' must be a non-empty list"),
    "not an object": ([1, 2, 3], "must be a JSON object"),
    "unknown output": (
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64", "data": ROW}], "outputs": [{"name": "y"}]},
        "unknown output 'y' (the model answers predict, predict_proba, decision_function)",
    ),
    "invalid json": (b'{"inputs": [', "not valid JSON"),
    "NaN is not JSON": (b'{"inputs": [{"name":"x","shape":[1,4],"datatype":"FP64","data":[NaN,1,2,3]}]}', "JSON"),
    "infinite value": (
        b'{"inputs": [{"name":"x","shape":[1,4],"datatype":"FP32","data":[1e300,1,2,3]}]}',
        "out of the range of FP32",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_400_with_the_reason_and_the_server_keeps_serving(server, model, case):
    body, reason = BAD_INPUTS[case]
    status, answer = server.infer(body)
    assert status == 400, answer
    assert reason in answer["error"]
    status, answer = server.infer({"inputs": [tensor([ROW])]})
    assert status == 200
    assert outputs(answer)["predict"].tolist() == model[0].predict([ROW]).tolist()


def test_a_body_over_the_limit_is_413(model):
    srv = Server(model[1], "--max-body-mb", "0.001")
    try:
        status, answer = srv.infer({"inputs": [tensor(np.zeros((100, 4)))]})
        assert status == 413
        assert "larger than 1048 bytes" in answer["error"]
        assert srv.infer({"inputs": [tensor([ROW])]})[0] == 200
    finally:
        srv.stop()


def test_metrics_count_requests_errors_and_latency(server):
    before_ok = server.metric('modelserver_requests_total{model="iris",code="200"}')
    before_bad = server.metric('modelserver_errors_total{model="iris",kind="bad_input"}')
    assert server.infer({"inputs": [tensor([ROW, ROW])]})[0] == 200
    assert server.infer({"inputs": [tensor([ROW[:3]])]})[0] == 400
    text = server.get("/metrics")[1]
    assert 'modelserver_info{model="iris",version="1",platform="sklearn"' in text
    assert server.metric('modelserver_requests_total{model="iris",code="200"}') == before_ok + 1
    assert server.metric('modelserver_errors_total{model="iris",kind="bad_input"}') == before_bad + 1
    assert server.metric('modelserver_request_duration_seconds_count{model="iris"}') >= before_ok + 2
    assert "# TYPE modelserver_batch_rows histogram" in text
    assert server.metric('modelserver_inflight_requests{model="iris"}') == 0


def raw_request(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    head = "POST /v2/models/iris/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def read_response(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), json.loads(rest[:length])


def burst(port: int, payloads: list[dict]) -> list[tuple[int, dict]]:
    """Open one connection per request, then send all requests back to back and collect the answers."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in payloads]
    try:
        wire = [raw_request(p) for p in payloads]
        for sock, data in zip(socks, wire, strict=True):
            sock.sendall(data)
        return [read_response(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@pytest.fixture(scope="module")
def batching_server(iris, tmp_path_factory) -> Iterator[tuple[Server, object]]:
    """A model that rejects unseen categories (OneHotEncoder), served with a generous batch delay."""
    estimator = make_pipeline(OneHotEncoder(handle_unknown="error"), LogisticRegression(max_iter=1000))
    estimator.fit(np.round(iris[0]), iris[1])  # rounded measurements as categories
    path = tmp_path_factory.mktemp("batching") / "model.pkl"
    joblib.dump(estimator, path)
    srv = Server(path, "--max-batch-delay-ms", "50", "--max-batch-size", "64")
    yield srv, estimator
    srv.stop()


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(batching_server, iris):
    srv, estimator = batching_server
    rng = np.random.default_rng(7)
    x = np.round(iris[0])
    for _attempt in range(5):
        picks = [rng.choice(len(x), size=rng.integers(1, 4), replace=False) for _ in range(24)]
        payloads = [
            {"id": f"r{i}", "inputs": [tensor(x[rows])], "outputs": [{"name": "predict_proba"}]}
            for i, rows in enumerate(picks)
        ]
        answers = burst(srv.port, payloads)
        for i, (rows, (status, body)) in enumerate(zip(picks, answers, strict=True)):
            assert status == 200, body
            assert body["id"] == f"r{i}"
            np.testing.assert_allclose(outputs(body)["predict_proba"], estimator.predict_proba(x[rows]), rtol=1e-12)
        batches = srv.metric('modelserver_batch_requests_count{model="iris"}')
        lone = srv.metric('modelserver_batch_requests_bucket{model="iris",le="1"}')
        if batches > lone:  # at least one predict call served several requests
            break
    else:
        pytest.fail("24 simultaneous requests were never batched together")
    assert srv.metric('modelserver_batch_requests_sum{model="iris"}') > batches


def test_a_request_the_model_rejects_fails_alone_in_its_batch(batching_server, iris):
    srv, estimator = batching_server
    good = np.round(iris[0][:20])
    bad = good[:1].copy()
    bad[0, 0] = 99.0  # a category the encoder never saw: the model raises ValueError
    payloads = [{"inputs": [tensor(good[i : i + 1])]} for i in range(10)]
    payloads.insert(5, {"inputs": [tensor(bad)]})
    answers = burst(srv.port, payloads)
    assert answers[5][0] == 400
    assert "the model rejected the input" in answers[5][1]["error"]
    assert "unknown categor" in answers[5][1]["error"]
    rest = [a for i, a in enumerate(answers) if i != 5]
    assert [s for s, _ in rest] == [200] * 10
    assert [outputs(b)["predict"].tolist()[0] for _, b in rest] == estimator.predict(good[:10]).tolist()


def test_a_lone_request_does_not_wait_for_the_batch_delay(model):
    """Requests that each find the server idle are predicted at once: the batch delay applies under load only."""
    srv = Server(model[1], "--max-batch-delay-ms", "10000")
    try:
        for _ in range(3):
            assert srv.infer({"inputs": [tensor([ROW])]})[0] == 200
        assert srv.metric('modelserver_batch_requests_count{model="iris"}') == 3
        assert srv.metric('modelserver_batch_waits_total{model="iris"}') == 0
    finally:
        srv.stop()


def test_workers_share_the_port(model):
    srv = Server(model[1], "--workers", "2")
    try:
        assert "2 worker(s)" in srv.banner
        pids = set()
        for _ in range(200):  # each request on a new connection: the kernel hands them to either worker
            assert srv.infer({"inputs": [tensor([ROW])]})[0] == 200
            pids.add(srv.get("/metrics")[1].split('pid="', 1)[1].split('"', 1)[0])
            if len(pids) == 2:
                break
        assert len(pids) == 2
    finally:
        srv.stop()
    assert srv.proc.returncode == 0


def test_the_banner_waits_until_every_worker_serves(iris, tmp_path):
    """Each worker loads its own copy of the model: one still loading, the banner (what a client waits for) has not
    come yet, though another worker already answers; once it has, the banner comes and both serve."""
    estimator = make_pipeline(FunctionTransformer(held_in_all_workers_but_one), LogisticRegression(max_iter=500))
    joblib.dump(estimator.fit(*iris), tmp_path / "model.joblib")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    release = tmp_path / "release"
    srv = Server(tmp_path, "--workers", "2", port=port, env={HOLD_ENV: str(release)}, banner=False)
    try:
        srv.wait_ready()  # the first worker serves
        assert not srv.banner_came(), "the banner came before the second worker served"
        release.touch()
        assert srv.banner_came(timeout=60), "no banner once both workers serve"
        srv.read_banner()
        assert "2 worker(s)" in srv.banner
        assert srv.port == port
        pids = set()
        for _ in range(200):  # each request on a new connection: the kernel hands them to either worker
            pids.add(srv.get("/metrics")[1].split('pid="', 1)[1].split('"', 1)[0])
            if len(pids) == 2:
                break
        assert len(pids) == 2
    finally:
        srv.stop()
