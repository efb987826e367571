"""What `make run` starts (the Procfile's web, worker, beat and agent under portal/supervise.py) serves the login page,
the demo login works, and a process that crashes comes back without taking the others down (issue 17.22).

Runs the embedded default in a fresh var/ folder: SQLite, folder broker, SQLite channel layer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.conf import settings

from portal.lib.serve import free_port

pytestmark = [pytest.mark.live, pytest.mark.smoke]


def fetch(opener, url: str, data: dict | None = None) -> tuple[int, str, str]:
    body = urlencode(data).encode() if data is not None else None
    with opener.open(url, data=body, timeout=10) as response:
        return response.status, response.geturl(), response.read().decode()


# What `make run` starts without a cluster (the Makefile's PROCESSES).
PROCESSES = ["web", "worker", "beat", "agent"]
RESTART_BACKOFF = 8  # seconds a crashed process stays down: /readyz is asked in between


class Portal:
    def __init__(self, base: str, proc: subprocess.Popen, state_file: Path) -> None:
        self.base, self.proc, self.state_file = base, proc, state_file

    def processes(self) -> dict:
        return json.loads(self.state_file.read_text())["processes"]

    def wait_for(self, condition, what: str) -> dict:
        deadline = time.monotonic() + 60
        while True:
            if self.state_file.exists() and condition(state := self.processes()):
                return state
            assert self.proc.poll() is None, self.proc.stdout.read()
            assert time.monotonic() < deadline, f"not within 60 s: {what}"
            time.sleep(0.1)


@pytest.fixture
def portal(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(PORTAL_VAR_DIR=str(tmp_path), PORTAL_PORT=str(port), DEMO_PASSWORD="procfile-demo-password")
    env.setdefault("SECRET_KEY", settings.SECRET_KEY)
    python = sys.executable
    for args in (["migrate", "--noinput"], ["migrate", "--noinput", "--database", "channels"], ["demo"]):
        subprocess.run([python, "manage.py", *args], cwd=settings.BASE_DIR, env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [python, "-m", "portal.supervise", "-f", "Procfile", "--backoff", str(RESTART_BACKOFF), *PROCESSES],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2)
            break
        except OSError:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the web process did not answer within 60 s"
            time.sleep(0.3)
    yield Portal(base, proc, tmp_path / "supervisor.json")
    proc.send_signal(signal.SIGTERM)  # as Ctrl-C: the supervisor stops every process
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def readyz(base: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_procfile_serves_the_login_page_and_the_demo_login_works(portal):
    portal = portal.base
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    status, _url, html = fetch(opener, f"{portal}/accounts/login/")
    assert status == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    status, url, html = fetch(
        opener,
        f"{portal}/accounts/login/",
        {"csrfmiddlewaretoken": token, "username": "demo", "password": "procfile-demo-password"},
    )
    assert status == 200
    assert url == f"{portal}/"
    assert "Demo" in html
    assert "Your projects" in html
    status, _url, body = fetch(opener, f"{portal}/readyz")
    assert '"status": "ready"' in body


def test_a_crashed_worker_comes_back_and_the_others_keep_serving(portal):
    state = portal.wait_for(lambda s: all(p["state"] == "running" for p in s.values()), "every process running")
    status, body = readyz(portal.base)
    assert status == 200, body
    assert set(body["processes"]) == set(PROCESSES)
    before = {name: p["pid"] for name, p in state.items()}

    os.killpg(before["worker"], signal.SIGKILL)  # the worker dies (kombu#1551 did it with JSONDecodeError)

    portal.wait_for(lambda s: s["worker"]["state"] == "restarting", "the worker seen down")
    status, body = readyz(portal.base)  # the web process still answers, and says what is missing
    assert status == 503
    assert body["checks"]["processes"]["error"].startswith("ProcessDown: worker restarting (last signal SIGKILL")
    assert body["checks"]["database"]["ok"] is True

    state = portal.wait_for(lambda s: s["worker"]["state"] == "running", "the worker running again")
    assert state["worker"]["pid"] != before["worker"]
    assert state["worker"]["restarts"] == 1
    for name in ("web", "beat", "agent"):
        assert state[name]["pid"] == before[name], f"{name} was restarted"
        assert state[name]["restarts"] == 0
    # Ready again once the new worker is up (its channel-layer and broker connections are made at start).
    deadline = time.monotonic() + 60
    while (answer := readyz(portal.base))[0] != 200:
        assert time.monotonic() < deadline, answer[1]["checks"]
        time.sleep(0.5)
