"""portal/supervise.py, what `make run` starts the Procfile with: a process that dies is restarted with backoff and the
others keep running, /readyz names it while it is down, SIGTERM stops everything (issue 17.22). Real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from portal.supervise import parse_procfile

pytestmark = [pytest.mark.live, pytest.mark.smoke]

WAIT = 30  # seconds any awaited state may take on a loaded machine


class Running:
    def __init__(self, proc: subprocess.Popen, state_file: Path) -> None:
        self.proc, self.state_file = proc, state_file

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())["processes"]

    def wait_for(self, condition: Callable[[dict], bool], what: str) -> dict:
        deadline = time.monotonic() + WAIT
        while True:
            if self.state_file.exists():
                state = self.state()
                if condition(state):
                    return state
            assert self.proc.poll() is None, self.proc.stdout.read()
            assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
            time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def supervise(tmp_path) -> Iterator[Callable[..., Running]]:
    started: list[subprocess.Popen] = []

    def start(procfile: str, *args: str) -> Running:
        (tmp_path / "Procfile").write_text(procfile)
        state_file = tmp_path / "supervisor.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "portal.supervise", "-f", str(tmp_path / "Procfile"), "--state", str(state_file),
             "--start-secs", "0.3", *args],
            cwd=settings.BASE_DIR,
            env={**os.environ, "MARKER": str(tmp_path / "marker")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        started.append(proc)
        return Running(proc, state_file)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_it_reads_a_procfile():
    text = "# the portal\nweb: uvicorn app --port ${PORT:-8000}\n\nworker: DB_CONN_MAX_AGE=300 celery worker\n"
    assert parse_procfile(text) == {
        "web": "uvicorn app --port ${PORT:-8000}",
        "worker": "DB_CONN_MAX_AGE=300 celery worker",
    }
    with pytest.raises(ValueError, match="line 1"):
        parse_procfile("just a command\n")


def test_a_process_that_dies_comes_back_and_the_others_keep_running(supervise):
    running = supervise("one: exec sleep 600\ntwo: exec sleep 600\n", "--backoff", "0.2")
    state = running.wait_for(lambda s: all(p["state"] == "running" for p in s.values()), "both running")
    one, two = state["one"]["pid"], state["two"]["pid"]

    os.killpg(one, signal.SIGKILL)  # a crash

    state = running.wait_for(
        lambda s: s["one"]["state"] == "running" and s["one"]["pid"] != one, "one restarted and running"
    )
    assert state["one"]["restarts"] == 1
    assert state["one"]["last_exit"]["signal"] == "SIGKILL"
    assert not alive(one)
    assert state["two"] == {**state["two"], "state": "running", "pid": two, "restarts": 0, "last_exit": None}
    assert alive(two)
    assert running.proc.poll() is None


@pytest.mark.django_db(databases="__all__")
def test_restarts_back_off_exponentially_and_readyz_names_the_process_while_it_is_down(
    supervise, client, settings, tmp_path
):
    """`flaky` exits at once until a marker file exists: each restart waits twice as long as the one before (up to
    the cap), and /readyz answers 503 naming it with its last exit, while `steady` is left alone."""
    running = supervise(
        "steady: exec sleep 600\nflaky: test -f \"$MARKER\" && exec sleep 600 || exit 3\n",
        "--backoff", "0.2", "--backoff-max", "0.8",
    )  # fmt: skip
    state = running.wait_for(lambda s: s["flaky"]["restarts"] >= 4 and s["steady"]["state"] == "running", "4 exits")
    steady = state["steady"]["pid"]
    running.proc.send_signal(signal.SIGTERM)
    output = running.proc.communicate(timeout=30)[0].splitlines()
    delays = [line.rsplit("restarting in ", 1)[1] for line in output if "flaky exited (code 3)" in line]
    assert delays[:4] == ["0.2 s", "0.4 s", "0.8 s", "0.8 s"]
    assert not alive(steady)

    # The same, seen through /readyz while flaky is down.
    running = supervise(
        "steady: exec sleep 600\nflaky: test -f \"$MARKER\" && exec sleep 600 || exit 3\n",
        "--backoff", "0.2", "--backoff-max", "0.4",
    )  # fmt: skip
    running.wait_for(lambda s: s["flaky"]["restarts"] >= 1 and s["steady"]["state"] == "running", "flaky down")
    settings.PORTAL_SUPERVISOR_STATE = str(running.state_file)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["processes"]["ok"] is False
    error = body["checks"]["processes"]["error"]
    assert error.startswith("ProcessDown: flaky ")
    assert "last exit code 3" in error
    assert "steady" not in error
    assert body["processes"]["steady"]["state"] == "running"
    assert body["processes"]["flaky"]["last_exit"]["code"] == 3
    # /readyz answers anyone (a load balancer): no pid or command line of the host in it.
    assert all(set(process).isdisjoint({"pid", "command"}) for process in body["processes"].values())

    (tmp_path / "marker").touch()  # flaky can start now
    running.wait_for(lambda s: s["flaky"]["state"] == "running", "flaky running")
    body = client.get("/readyz").json()
    assert body["checks"]["processes"] == {"ok": True, "ms": body["checks"]["processes"]["ms"]}
    assert body["processes"]["steady"]["restarts"] == 0


def test_sigterm_stops_every_process_even_one_that_ignores_it(supervise):
    running = supervise(
        "polite: exec sleep 600\nstubborn: trap '' TERM; sleep 600\n",
        "--stop-timeout", "1",
    )  # fmt: skip
    state = running.wait_for(lambda s: all(p["state"] == "running" for p in s.values()), "both running")
    pids = [p["pid"] for p in state.values()]

    running.proc.send_signal(signal.SIGTERM)

    output = running.proc.communicate(timeout=30)[0]
    assert running.proc.returncode == 0, output
    assert "SIGKILL" in output  # the stubborn one needed it
    assert not any(alive(pid) for pid in pids)
    final = running.state()
    assert {p["state"] for p in final.values()} == {"stopped"}
