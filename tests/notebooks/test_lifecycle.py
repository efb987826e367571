"""A real JupyterLab through the real agent: start, env contract, files across stop/start, the process tree gone
after stop, restart, and a crash that shows as failed with its reason and log."""

from __future__ import annotations

import os
import signal
import stat
import time

import pytest
import requests
from rest_framework.test import APIClient

from apps.accounts.services import authenticate_token
from apps.models.models import Experiment, Metric
from apps.notebooks import services, workspace
from apps.notebooks.models import Notebook
from tests.factories import ProjectFactory, UserFactory
from tests.notebooks.conftest import Jupyter, gone, process_tree, server_process, wait_for, wait_running

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def small_notebook(project, owner, **fields) -> Notebook:
    return services.create_notebook(project, owner, name="eda", cpu="0.5", memory="512Mi", **fields)


def server_env(nb: Notebook) -> dict[str, str]:
    raw = open(f"/proc/{server_process(nb).pid}/environ", "rb").read()  # noqa: SIM115 (a /proc file)
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_files_survive_stop_and_start_the_tree_dies_and_a_crash_is_reported(nb_agent, work_dir):
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    nb = small_notebook(project, alice)

    nb = wait_running(services.start_notebook(nb))
    jupyter = Jupyter(nb)
    home = workspace.home_dir(project, alice)
    assert nb.upstream.startswith("http://127.0.0.1:")
    assert nb.token

    # The server runs in the owner's folder, which lists the project's shared folder.
    listing = requests.get(jupyter.url("api/contents/"), headers=jupyter.headers, timeout=10).json()
    assert {"shared": "directory"}.items() <= {item["name"]: item["type"] for item in listing["content"]}.items()
    (workspace.shared_dir(project) / "data.csv").write_text("a,b\n1,2\n")
    shared = requests.get(jupyter.url("api/contents/shared"), headers=jupyter.headers, timeout=10).json()
    assert [item["name"] for item in shared["content"]] == ["data.csv"]

    # The env contract: a project-scoped token for the API and MLflow, HOME in the owner's folder.
    env = server_env(nb)
    assert env["HOME"] == str(home)
    assert server_process(nb).cwd() == str(home)
    assert env["MLFLOW_TRACKING_URI"]
    assert env["PORTAL_API_URL"].endswith("/api/v1/")
    assert env["MLFLOW_TRACKING_TOKEN"] == env["PORTAL_API_TOKEN"]
    token = authenticate_token(env["PORTAL_API_TOKEN"])
    assert token is not None
    assert token.project_id == project.pk
    assert token.expires_at is not None
    assert env["JUPYTER_TOKEN"] == nb.token
    assert nb.token not in " ".join(server_process(nb).cmdline())  # not in the process list
    # mlflow.log_metric with that token lands in the project's (default) experiment.
    mlflow = APIClient()
    mlflow.credentials(HTTP_AUTHORIZATION=f"Bearer {env['MLFLOW_TRACKING_TOKEN']}")
    run = mlflow.post("/api/2.0/mlflow/runs/create", {"experiment_id": "0"}, format="json").json()["run"]
    logged = mlflow.post(
        "/api/2.0/mlflow/runs/log-metric",
        {"run_id": run["info"]["run_id"], "key": "loss", "value": 0.5, "timestamp": 1, "step": 0},
        format="json",
    )
    assert logged.status_code == 200, logged.content
    assert Metric.objects.filter(key="loss", run__experiment__project=project).exists()
    assert Experiment.objects.get(pk=run["info"]["experiment_id"]).project == project

    # A file written through Jupyter, and a kernel, so that the tree has more than the server in it.
    put = requests.put(
        jupyter.url("api/contents/notes.txt"),
        json={"type": "file", "format": "text", "content": "kept across stop/start"},
        headers=jupyter.headers,
        timeout=10,
    )
    assert put.status_code in (200, 201), put.text
    assert (home / "notes.txt").read_text() == "kept across stop/start"
    kernel = requests.post(jupyter.url("api/kernels"), json={"name": "python3"}, headers=jupyter.headers, timeout=30)
    assert kernel.status_code == 201, kernel.text
    deadline = time.monotonic() + 30
    while len(process_tree(nb)) < 2:
        assert time.monotonic() < deadline, "the kernel process did not appear"
        time.sleep(0.2)
    tree = process_tree(nb)

    nb = wait_for(services.stop_notebook(nb), Notebook.Status.STOPPED)
    assert not gone(tree), f"still alive after stop: {gone(tree)}"
    assert nb.upstream == ""
    assert not nb.token
    assert nb.stopped_at is not None
    assert authenticate_token(env["PORTAL_API_TOKEN"]) is None  # revoked at stop

    # Started again: a new server, new token, the same files.
    nb = wait_running(services.restart_notebook(nb))
    assert nb.session == 2
    assert nb.token != env["JUPYTER_TOKEN"]
    jupyter = Jupyter(nb)
    read = requests.get(jupyter.url("api/contents/notes.txt"), headers=jupyter.headers, timeout=10).json()
    assert read["content"] == "kept across stop/start"

    # Restarting a running notebook replaces its server; the old tree goes away.
    old_tree, old_handle = process_tree(nb), nb.handle
    nb = wait_running(services.restart_notebook(nb))
    assert nb.handle != old_handle
    deadline = time.monotonic() + 20
    while gone(old_tree):
        assert time.monotonic() < deadline, f"the old server survived a restart: {gone(old_tree)}"
        time.sleep(0.2)

    # A server that dies under it (kill -9) is failed, with the reason and its log kept.
    server_process(nb).send_signal(signal.SIGKILL)
    nb = wait_for(nb, Notebook.Status.FAILED)
    assert "killed by signal 9" in nb.reason
    assert "Jupyter Server" in nb.log_tail  # its startup lines are kept
    assert not nb.token
    assert nb.upstream == ""


def test_a_server_that_cannot_start_fails_with_the_last_error_line(tmp_path, work_dir):
    """A broken notebook environment: the reason names the exit code and what the server printed last."""
    from tests.jobs.conftest import AgentProcess

    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\necho 'starting'\necho \"ModuleNotFoundError: No module named 'jupyterlab'\" >&2\nexit 3\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    agent = AgentProcess(tmp_path, env={"PORTAL_TASK_ENV_NOTEBOOK": str(fake), "PORTAL_WORK_DIR": str(work_dir)})
    agent.start()
    try:
        alice = UserFactory(username="alice")
        project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
        nb = wait_for(services.start_notebook(small_notebook(project, alice)), Notebook.Status.FAILED)
    finally:
        agent.stop()
    assert nb.reason == "exited with code 3: ModuleNotFoundError: No module named 'jupyterlab'"
    # stdout and stderr are read apart: their lines may interleave either way
    assert sorted(nb.log_tail.splitlines()) == ["ModuleNotFoundError: No module named 'jupyterlab'", "starting"]
    assert nb.api_token.revoked_at is not None
    assert os.path.isdir(workspace.home_dir(project, alice))
