"""Escape attempts from inside local workloads (issue 27): a task, a notebook and a model server of project "alpha",
run by a real local agent, try to read project "beta"'s files, the environ of the agent and of a live workload of
beta, the portal's state folder and secret key, and to reach the database, Redis and another workload's port.
Each attempt must fail, and what the workload is meant to reach (its own inputs, its own folder, the portal's HTTP
port, its own serving port from the host) must still work: a sandbox that blocked everything would pass otherwise.

The notebook and the model server are the workloads their builders make (apps/notebooks/launch.py,
apps/serving/replicas.py: kind, folders, declared port, env) with the probe as their command."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from apps.runtime.local import sandbox
from apps.runtime.local.launch import free_port
from apps.runtime.local.runtime import LocalRuntime
from apps.runtime.workload import Workload
from tests.jobs.conftest import AgentProcess

# Skipped only where the tools are not installed (`make sandbox`, a step of `make test`); installed but broken fails.
pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in sandbox.TOOLS),
    reason=f"the sandbox is not installed: {sandbox.INSTALL_HINT}",
)

VICTIM_TOKEN = "beta-live-token-" + uuid.uuid4().hex

PROBE = textwrap.dedent(
    """
    import json, os, socket, sys, traceback
    sys.excepthook = lambda *exc: open("probe-error.txt", "w").write("".join(traceback.format_exception(*exc)))
    targets = json.loads(sys.argv[1])
    found = {}

    def attempt(name, action):
        try:
            found[name] = ["escaped", str(action())[:200]]
        except Exception as exc:
            found[name] = ["blocked", type(exc).__name__]

    def read(path):
        with open(path, "rb") as fh:
            return fh.read()

    def connect(port):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            return f"connected to {port}"

    for name, path in targets["files"].items():
        attempt(name, lambda path=path: read(path))
    for name, path in targets["folders"].items():  # a listing is an escape when it names anything of beta's or state
        try:
            listed = os.listdir(path)
        except OSError as exc:
            found[name] = ["blocked", type(exc).__name__]
        else:
            found[name] = ["escaped" if set(listed) - set(targets["folders_may_hold"]) else "blocked", listed]
    for name, port in targets["ports"].items():
        attempt(name, lambda port=port: connect(port))
    def scan_environs():
        leaks = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())):
            try:
                text = read(f"/proc/{pid}/environ")
            except OSError:
                continue
            if b"DATABASE_URL" in text or b"VICTIM" in text:
                leaks.append(pid)
        if not leaks:
            raise PermissionError("no other environ")
        return leaks

    attempt("proc_environ", scan_environs)
    attempt("agent_environ", lambda: read(f"/proc/{targets['agent_pid']}/environ"))
    attempt("victim_environ", lambda: read(f"/proc/{targets['victim_pid']}/environ"))
    env = " ".join(f"{k}={v}" for k, v in os.environ.items())
    found["env_leak"] = ["escaped", env] if any(s in env for s in targets["secrets"]) else ["blocked", ""]
    # What it is meant to reach.
    found["own_input"] = read(targets["own_input"]).decode()
    with open(os.path.join(os.getcwd(), "written.txt"), "w") as fh:
        fh.write("ok")
    found["own_folder"] = "written"
    found["portal"] = connect(targets["portal_port"])
    with open(os.path.join(os.getcwd(), "probe.json"), "w") as fh:
        json.dump(found, fh)
    if targets.get("serve_port"):  # answer the host once on the declared port, then exit
        server = socket.socket()
        server.bind(("127.0.0.1", targets["serve_port"]))
        server.listen()
        open(os.path.join(os.getcwd(), "listening"), "w").close()
        conn, _ = server.accept()
        conn.sendall(b"served from inside")
        conn.close()
    """
)


class Listener:
    """A TCP port on the host's loopback that answers every connection (the portal's stand-in, a fake database)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def world(transactional_db, tmp_path, settings):
    work = tmp_path / "work"
    settings.PORTAL_WORK_DIR = work
    portal, database = Listener(), Listener()
    beta_files = {
        "beta_output": work / "beta" / "run-1" / "train" / "attempt-1" / "model.txt",
        "beta_home": work / "projects" / "beta" / "home" / "bob" / "notes.txt",
        "beta_shared": work / "projects" / "beta" / "shared" / "data.txt",
        "beta_serving": work / "serving" / "beta" / "svc" / "r1" / "model" / "weights.txt",
        "beta_dataset": work / "datasets" / ("b" * 64) / "rows.csv",
    }
    for path in beta_files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("beta's secret")
    own_input = work / "alpha" / "run-1" / "prepare" / "attempt-1" / "data.txt"
    own_input.parent.mkdir(parents=True)
    own_input.write_text("alpha's input")
    agent = AgentProcess(tmp_path, env={"SITE_URL": f"http://127.0.0.1:{portal.port}", "PORTAL_LOCAL_SANDBOX": "auto"})
    agent.start()
    runtime = LocalRuntime()
    victim = Workload(
        uid="victim-" + uuid.uuid4().hex[:8], name="victim", project="beta", kind="job",
        command=[sys.executable, "-c", "import time; time.sleep(120)"],
        env={"PORTAL_API_TOKEN": VICTIM_TOKEN, "VICTIM": "1"}, workdir=str(beta_files["beta_output"].parent),
    )  # fmt: skip
    runtime.submit(victim)
    victim_pid = wait_for_pid(victim.uid)
    secret_key_file = os.environ.get("SECRET_KEY_FILE") or str(settings.VAR_DIR / "secret_key")
    targets = {
        "files": {
            **{name: str(path) for name, path in beta_files.items()},
            "secret_key": secret_key_file,
            "sqlite": str(settings.VAR_DIR / "test-portal.sqlite3"),
            "agent_log": str(tmp_path / "agent.log"),
        },
        "folders": {
            "portal_state": str(settings.VAR_DIR),
            "work_root": str(work),
            "datasets": str(work / "datasets"),
            "projects": str(work / "projects"),
            "serving": str(work / "serving"),
        },
        # What a listing may show: the workload's own folders' names (the mount points of what it sees).
        "folders_may_hold": ["alpha", "projects", "serving"],
        "ports": {"postgres": 5432, "redis": 6379, "fake_database": database.port},
        "agent_pid": agent.proc.pid,
        "victim_pid": victim_pid,
        "secrets": [VICTIM_TOKEN, settings.SECRET_KEY, "DATABASE_URL"],
        "own_input": str(own_input),
        "portal_port": portal.port,
    }
    yield {"runtime": runtime, "work": work, "targets": targets, "agent": agent}
    runtime.cancel(victim.uid)
    agent.stop()
    portal.close()
    database.close()


def wait_for_pid(uid: str, seconds: float = 60) -> int:
    from apps.runtime.models import LocalWorkload

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = LocalWorkload.objects.filter(uid=uid).first()
        if row is not None and row.pids:
            return int(next(iter(row.pids.values())))
        assert row is None or row.state in ("pending", "running"), (row.state, row.reason)
        time.sleep(0.1)
    raise AssertionError(f"{uid} did not start")


def run_probe(world, *, kind: str, workdir: Path, ports: dict[str, int] | None = None, env=None) -> dict:
    targets = {**world["targets"], "serve_port": (ports or {}).get("http")}
    workload = Workload(
        uid=f"probe-{kind}-" + uuid.uuid4().hex[:8], name="probe", project="alpha", kind=kind,
        command=[sys.executable, "-c", PROBE, json.dumps(targets)], env=env or {}, workdir=str(workdir),
        ports=ports or {},
    )  # fmt: skip
    world["runtime"].submit(workload)
    deadline = time.monotonic() + 90
    if ports:  # from the host, the declared port reaches the server inside (the router's and the proxy's way in)
        while not (workdir / "listening").exists():
            assert time.monotonic() < deadline, (world["runtime"].poll(workload.uid), world["agent"].log.read_text())
            time.sleep(0.1)
        answer = b""
        while not answer and time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", ports["http"]), timeout=5) as sock:
                answer = sock.recv(100)
            time.sleep(0.1)
        assert answer == b"served from inside"
    while not (status := world["runtime"].poll(workload.uid)).phase.finished:
        assert time.monotonic() < deadline, world["agent"].log.read_text()
        time.sleep(0.1)
    error = (workdir / "probe-error.txt").read_text() if (workdir / "probe-error.txt").exists() else ""
    assert status.phase == "succeeded", (status, error, world["agent"].log.read_text()[-3000:])
    found = json.loads((workdir / "probe.json").read_text())
    assert (workdir / "written.txt").read_text() == "ok"
    return found


def assert_contained(found: dict) -> None:
    escaped = {name: value for name, value in found.items() if isinstance(value, list) and value[0] != "blocked"}
    assert escaped == {}
    assert found["own_input"] == "alpha's input"
    assert found["own_folder"] == "written"
    assert found["portal"].startswith("connected")
    for name in ("beta_output", "beta_home", "secret_key", "agent_environ", "victim_environ", "postgres", "redis"):
        assert name in found  # every attempt was made


def test_a_task_cannot_escape(world):
    out = world["work"] / "alpha" / "run-2" / "probe" / "attempt-1"
    out.mkdir(parents=True)
    assert_contained(run_probe(world, kind="job", workdir=out, env={"PORTAL_OUTPUT_DIR": str(out)}))


def test_a_notebook_cannot_escape(world):
    home = world["work"] / "projects" / "alpha" / "home" / "alice"
    home.mkdir(parents=True)
    port = free_port()
    found = run_probe(world, kind="notebook", workdir=home, ports={"http": port}, env={"HOME": str(home)})
    assert_contained(found)


def test_a_model_server_cannot_escape(world):
    folder = world["work"] / "serving" / "alpha" / "iris"
    folder.mkdir(parents=True)
    assert_contained(run_probe(world, kind="service", workdir=folder, ports={"http": free_port()}))


def test_workloads_of_a_host_without_sandbox_are_refused_for_a_second_project(transactional_db, tmp_path, settings):
    """Mode "auto" without bubblewrap: the first project's workloads run, another project's fail saying why."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    agent = AgentProcess(tmp_path, env={"PATH": str(tmp_path / "empty-path"), "PORTAL_LOCAL_SANDBOX": "auto"})
    agent.start()
    try:
        runtime = LocalRuntime()
        command = [sys.executable, "-c", "print('ok')"]
        first = Workload(uid=f"first-{uuid.uuid4().hex[:6]}", name="a", project="alpha", command=command)
        second = Workload(uid=f"second-{uuid.uuid4().hex[:6]}", name="b", project="beta", command=command)
        results = {}
        for workload in (first, second):
            runtime.submit(workload)
            deadline = time.monotonic() + 60
            while not (status := runtime.poll(workload.uid)).phase.finished:
                assert time.monotonic() < deadline, agent.log.read_text()
                time.sleep(0.1)
            results[workload.project] = status
        assert results["alpha"].phase == "succeeded", results["alpha"]
        assert results["beta"].phase == "failed"
        assert "cannot isolate workloads" in results["beta"].reason
        assert "project 'alpha' ran here first" in results["beta"].reason
        assert "PORTAL_LOCAL_SANDBOX=off" in results["beta"].reason
        assert "LOCAL WORKLOADS ARE NOT ISOLATED" in agent.log.read_text()
    finally:
        agent.stop()


def test_mode_required_refuses_every_workload_on_a_host_without_sandbox(db, settings, monkeypatch):
    settings.PORTAL_LOCAL_SANDBOX = "required"
    monkeypatch.setattr(sandbox, "support", lambda: sandbox.Support(False, "bwrap not found: install it"))
    workload = Workload(uid="w", name="w", project="alpha", command=["true"])
    with pytest.raises(sandbox.SandboxRefused) as refused:
        sandbox.admit(workload, socket.gethostname())
    assert str(refused.value) == (
        "refused: the local sandbox is required (PORTAL_LOCAL_SANDBOX=required) but bwrap not found: install it"
    )
    settings.PORTAL_LOCAL_SANDBOX = "off"  # the single trusted team: runs, unsandboxed
    assert sandbox.admit(workload, socket.gethostname()) is False
