"""A real agent for the notebook tests, and helpers that drive a notebook the way the workers would."""

from __future__ import annotations

import os
import time

import psutil
import pytest
from django.conf import settings

from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.runtime.models import LocalWorkload
from tests.jobs.conftest import AgentProcess

READY_SECONDS = 120  # JupyterLab is ready in ~3 s on an idle machine; a loaded CI box is slower


@pytest.fixture
def notebook_python() -> str:
    python = settings.PORTAL_TASK_ENVS["notebook"]
    if not os.access(python, os.X_OK):
        pytest.skip(f"the 'notebook' task environment is not installed (no {python}): run `make notebook-env`")
    return python


@pytest.fixture
def work_dir(tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return settings.PORTAL_WORK_DIR


@pytest.fixture
def nb_agent(tmp_path, work_dir, notebook_python):
    process = AgentProcess(tmp_path, env={"PORTAL_WORK_DIR": str(work_dir)})
    process.start()
    yield process
    process.stop()


def wait_for(nb: Notebook, *statuses: str, timeout: float = 60) -> Notebook:
    deadline = time.monotonic() + timeout
    while True:
        nb.refresh_from_db()
        if nb.status in statuses:
            return nb
        assert time.monotonic() < deadline, f"notebook still {nb.status} ({nb.reason}); log:\n{nb.log_tail}"
        time.sleep(0.2)


def wait_running(nb: Notebook, timeout: float = READY_SECONDS) -> Notebook:
    """What the readiness task does on a worker: poll the server until it answers, then RUNNING."""
    deadline = time.monotonic() + timeout
    while True:
        nb.refresh_from_db()
        if nb.status == Notebook.Status.RUNNING:
            return nb
        assert nb.status == Notebook.Status.STARTING, f"{nb.status}: {nb.reason}\n{nb.log_tail}"
        if services.ready(nb):
            services.mark_running(nb.pk, nb.handle)
            continue
        assert time.monotonic() < deadline, f"the server did not answer in {timeout} s; log:\n{nb.log_tail}"
        time.sleep(0.25)


def server_process(nb: Notebook) -> psutil.Process:
    pid = LocalWorkload.objects.get(uid=nb.handle).pids["0"]
    return psutil.Process(int(pid))


def process_tree(nb: Notebook) -> list[psutil.Process]:
    root = server_process(nb)
    return [root, *root.children(recursive=True)]


def gone(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes of `procs` still alive (the same process: pid and start time; zombies count as gone)."""
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


class Jupyter:
    """Talks to a notebook's server directly (the portal's proxy is tested elsewhere)."""

    def __init__(self, nb: Notebook) -> None:
        self.nb = nb
        self.base = f"{nb.upstream}{nb.base_path}"
        self.headers = {"Authorization": f"token {nb.token}"}

    def url(self, path: str) -> str:
        return self.base + path

    def ws_url(self, path: str) -> str:
        return self.url(path).replace("http://", "ws://", 1)
