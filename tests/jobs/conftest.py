"""A real local agent process for orchestration tests, and a loop that drives runs to the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.conf import settings

from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun
from tests.conftest import database_url_of_test_db
from tests.factories import ProjectFactory, UserFactory


class AgentProcess:
    def __init__(self, work_dir: Path, env: dict[str, str] | None = None) -> None:
        self.work_dir = work_dir
        self.env = env or {}  # extra variables of the agent's environment (its settings)
        self.proc: subprocess.Popen | None = None
        self.log = work_dir / "agent.log"

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url_of_test_db(),
            "PORTAL_VAR_DIR": str(settings.VAR_DIR),
            # The portal's work folder (where the dispatcher puts outputs): the sandbox shows a workload its project's.
            "PORTAL_WORK_DIR": str(settings.PORTAL_WORK_DIR),
            "PORTAL_AGENT_TIMEOUT": str(settings.PORTAL_AGENT_TIMEOUT),
            "SECRET_KEY": settings.SECRET_KEY,
            **self.env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runagent"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        from apps.runtime.local.runtime import live_agents

        # A guard against an agent that hangs, not a timing: on a loaded machine Django and the agent take > 30 s.
        deadline = time.monotonic() + 120
        try:
            while not live_agents().filter(pid=self.proc.pid).exists():
                assert self.proc.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, "the agent did not start"
                time.sleep(0.1)
        except BaseException:  # the fixture never yields, so nothing else stops it: a stray agent would take the
            self.stop()  # next tests' runs from the same test database
            raise

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def agent(transactional_db, tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    process = AgentProcess(tmp_path)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def train_python() -> str:
    """The interpreter of the "train" task environment (torch), or skip: it is installed by `make train-env`."""
    python = settings.PORTAL_TASK_ENVS["train"]
    if not os.access(python, os.X_OK):
        pytest.skip(f"the 'train' task environment is not installed (no {python}): run `make train-env`")
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, timeout=120, check=False)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the 'train' task environment ({python}) cannot import torch: {last}; run `make train-env`")
    return python


@pytest.fixture(scope="session")
def onnx_python() -> str:
    """The train environment's interpreter, or skip: `make train-env` installs torch and the ONNX packages there."""
    python = settings.PORTAL_TASK_ENVS["train"]
    if not os.access(python, os.X_OK):
        pytest.skip(f"the 'train' task environment is not installed (no {python}): run `make train-env`")
    probe = subprocess.run(  # nosec B603
        [python, "-c", "import torch, onnx, onnxruntime, skl2onnx, onnxconverter_common, onnxscript"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the 'train' task environment ({python}) lacks an ONNX package: {last}; run `make train-env`")
    return python


def drive(run: PipelineRun, timeout: float = 60, until=None, on_pass=None) -> PipelineRun:
    """Advance the run the way workers do until it finishes (or `until(run)` holds), calling `on_pass()` after each
    pass (what beat would also run meanwhile, e.g. serving's reconcile)."""
    deadline = time.monotonic() + timeout
    while True:
        orchestrator.advance_run(run.pk)
        if on_pass is not None:
            on_pass()
        run.refresh_from_db()
        if until(run) if until else run.is_finished:
            return run
        assert time.monotonic() < deadline, f"run still {run.status} after {timeout} s: {list(run.tasks.values())}"
        time.sleep(0.1)


def processes_with(marker: str) -> list[psutil.Process]:
    """The live processes on this host whose command line holds `marker`. A sandboxed task sees neither the test's
    folders nor its own host pid (it has a PID namespace of its own): the test finds its processes from outside."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(marker in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def has_started(run: PipelineRun, name: str = "started") -> bool:
    """Whether a task of the run wrote `name` in its own folder (the one place a sandboxed task can write)."""
    return any((Path(folder) / name).exists() for folder in run.tasks.values_list("output_dir", flat=True) if folder)


@pytest.fixture
def owner(transactional_db):
    """Alice, in a database the agent process also sees (committed, not a test transaction)."""
    return UserFactory(username="alice")


@pytest.fixture
def project(owner):
    return ProjectFactory(owner=owner, slug="project-a")


@pytest.fixture(scope="module")
def spark_python() -> str:
    """The train environment's interpreter with pyspark, and a Java to run it; else skip saying what is missing
    (tests/jobs/test_spark_features*.py)."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 or 21 and this machine has none (no java on PATH, no JAVA_HOME)")
    python = settings.PORTAL_TASK_ENVS["train"]
    if not os.access(python, os.X_OK):
        pytest.skip(f"the 'train' task environment is not installed (no {python}): run `make train-env`")
    probe = subprocess.run([python, "-c", "import pyspark"], capture_output=True, check=False)  # nosec B603
    if probe.returncode != 0:
        pytest.skip(f"the 'train' task environment ({python}) has no pyspark: run `make train-env`")
    return python


@pytest.fixture
def api_agent(live_asgi, tmp_path, settings):
    """An agent told where the API is: it dispatches the tasks after the first and gives them SITE_URL."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url  # where tasks reach the tracking API
    process = AgentProcess(tmp_path, env={"SITE_URL": live_asgi.url})
    process.start()
    yield process
    process.stop()


@dataclass
class IrisLab:
    """Alice's project-a with the demo's iris dataset (v1 and v2) and the built-in templates, served by `api_agent`:
    what the built-in template pipelines (tests/jobs/test_*_pipeline.py) run in."""

    owner: Any
    project: Any
    dataset: Any

    def run(self, name: str, spec: dict[str, Any], timeout: float = 600, **drive_options: Any) -> PipelineRun:
        """Save `spec` as pipeline `name` and drive a run of it to the end."""
        from apps.jobs.services import save_pipeline, start_run

        pipeline = save_pipeline(self.project, self.owner, name=name, description="", spec=spec)
        return drive(start_run(pipeline, self.owner), timeout=timeout, **drive_options)


@pytest.fixture
def iris_lab(api_agent) -> IrisLab:
    from apps.datasets.demo import populate
    from apps.jobs.builtin import load_builtin_templates

    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    dataset = populate(project, owner)  # the iris dataset, v1 and v2
    load_builtin_templates()
    return IrisLab(owner, project, dataset)


def assert_succeeded(run: PipelineRun) -> None:
    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
