"""Side by side: the same official-client script (tests/models/clients/compare.py: log, history, search,
artifacts, log_model, register, alias, load, error codes) against the portal and against a real `mlflow server`
(.venv-mlflow, SQLite backend in a temporary folder); the answers must be the same.

One documented difference is left out of the equality and asserted on its own: MLflow's SQL store keeps ±Infinity
as ±1.797e308 (the largest double), the portal keeps the infinity (docs/tracking.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import make_token
from tests.jobs.test_builtin_tasks import free_port
from tests.models.conftest import CLIENT_PYTHON, run_client

pytestmark = pytest.mark.live
START_TIMEOUT = 300  # seconds: the server migrates its SQLite database and imports a lot before it listens


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory) -> Iterator[str]:
    """`mlflow server` from .venv-mlflow on loopback, one worker, its own SQLite database and artifact folder."""
    if not CLIENT_PYTHON.exists():
        pytest.skip("the official client's venv is missing: run `make mlflow-env`")
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [
        str(CLIENT_PYTHON.with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_"))}
    # Without its job runner (GenAI jobs, which the compared script does not use): by default the server also starts
    # eight job processes, each importing mlflow, which doubled its start-up and slowed the rest of a loaded suite.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    log = (root / "server.log").open("w")
    # its own session: the server starts uvicorn workers, stopped with it as one group
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"mlflow server exited: {Path(log.name).read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"mlflow server did not listen within {START_TIMEOUT} s: {Path(log.name).read_text()[-3000:]}"
                )
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already (a server that exited)
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_the_official_client_gets_the_same_answers_from_the_portal_as_from_mlflow(world, live_asgi, mlflow_server):
    token = make_token(world.alice, project=world.project_a)
    portal = run_client("compare.py", live_asgi.url, token, "side-by-side", timeout=600)
    mlflow = run_client("compare.py", mlflow_server, "unused", "side-by-side", timeout=600)

    # ±Infinity: the portal keeps it; MLflow's SQL store clamps it to the largest double
    for out in (portal, mlflow):
        for key in ("inf", "ninf"):
            out["first"]["metrics"].pop(key)
    assert portal.pop("special_history") == {"inf": ["inf"], "ninf": ["-inf"]}
    largest = sys.float_info.max
    assert mlflow.pop("special_history") == {"inf": [largest], "ninf": [-largest]}

    differing = {key: (portal.get(key), mlflow.get(key)) for key in portal.keys() | mlflow.keys()
                 if portal.get(key) != mlflow.get(key)}  # fmt: skip
    assert not differing, differing
    # and the answers are the ones MLflow's semantics give (not two servers agreeing on a wrong one)
    assert portal["loss_points"] == 120  # log_model re-sent the last point: stored once
    assert portal["batch_history"] == [[i, float(i)] for i in range(10)]
    assert portal["first"]["params"] == {"alpha": "0.5", "beta": "b", "gamma": "3", "p_batch": "1"}
    assert portal["changed_param"] == "INVALID_PARAMETER_VALUE"
    assert portal["server_info_status"] == 200
    assert portal["predictions_match"] is True
