"""The idle culler against a real JupyterLab: warned before, not stopped while a kernel is busy or a terminal is
used, stopped (files kept) once idle past its timeout. Passes are run with a `now` ahead of the clock."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
import requests
from websockets.sync.client import connect

from apps.accounts.models import Notification
from apps.notebooks import culler, services
from apps.notebooks.models import Notebook
from tests.factories import ProjectFactory, UserFactory
from tests.notebooks.conftest import Jupyter, wait_for, wait_running

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def execute(jupyter: Jupyter, kernel_id: str, code: str) -> None:
    """Send `code` to the kernel over its websocket and return once the kernel says it is busy with it."""
    msg_id = uuid.uuid4().hex
    message = {
        "header": {
            "msg_id": msg_id, "msg_type": "execute_request", "username": "test", "session": uuid.uuid4().hex,
            "version": "5.3", "date": "2026-01-01T00:00:00Z",
        },
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }  # fmt: skip
    with connect(jupyter.ws_url(f"api/kernels/{kernel_id}/channels"), additional_headers=jupyter.headers) as ws:
        ws.send(json.dumps(message))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = json.loads(ws.recv(timeout=30))
            if (
                reply.get("msg_type") == "status"
                and reply.get("parent_header", {}).get("msg_id") == msg_id
                and reply["content"]["execution_state"] == "busy"
            ):
                return
    raise AssertionError("the kernel never became busy")


def kernel_state(jupyter: Jupyter, kernel_id: str) -> str:
    kernels = requests.get(jupyter.url("api/kernels"), headers=jupyter.headers, timeout=10).json()
    return next(k["execution_state"] for k in kernels if k["id"] == kernel_id)


def type_in_terminal(jupyter: Jupyter, name: str, text: str) -> None:
    with connect(jupyter.ws_url(f"terminals/websocket/{name}"), additional_headers=jupyter.headers) as ws:
        ws.send(json.dumps(["stdin", f"echo {text}\r"]))
        deadline = time.monotonic() + 30
        seen = ""
        while text not in seen.replace(f"echo {text}", ""):
            assert time.monotonic() < deadline, f"the terminal did not answer: {seen!r}"
            kind, *data = json.loads(ws.recv(timeout=30))
            if kind == "stdout":
                seen += data[0]


def test_idle_notebooks_are_warned_then_stopped_but_busy_kernels_and_terminals_keep_them(nb_agent, settings):
    settings.PORTAL_NOTEBOOK_IDLE_WARNING = 2
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    nb = services.create_notebook(project, alice, name="eda", cpu="0.5", memory="512Mi", idle_timeout=5)
    nb = wait_running(services.start_notebook(nb))
    jupyter = Jupyter(nb)
    t0 = nb.last_activity

    # Within the warning window: the owner is told once, the notebook keeps running.
    assert culler.cull_idle_notebooks(now=t0 + timedelta(minutes=3.5)) == {"warned": 1, "stopped": 0}
    assert culler.cull_idle_notebooks(now=t0 + timedelta(minutes=3.6)) == {"warned": 0, "stopped": 0}
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.RUNNING
    assert nb.idle_warned_at == t0 + timedelta(minutes=3.5)
    warning = Notification.objects.get(user=alice)
    assert "eda" in warning.message
    assert "will be stopped in about 1 minute." in warning.message
    assert warning.url == f"/p/project-a/notebooks/{nb.pk}/"

    # A kernel busy with a long cell counts as activity now, however late it is.
    kernel_id = requests.post(jupyter.url("api/kernels"), json={"name": "python3"}, headers=jupyter.headers, timeout=60)
    kernel_id = kernel_id.json()["id"]
    execute(jupyter, kernel_id, "import time; time.sleep(60)")
    assert kernel_state(jupyter, kernel_id) == "busy"
    late = t0 + timedelta(minutes=30)
    assert culler.cull_idle_notebooks(now=late) == {"warned": 0, "stopped": 0}
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.RUNNING
    assert nb.last_activity == late
    assert nb.idle_warned_at is None
    requests.delete(jupyter.url(f"api/kernels/{kernel_id}"), headers=jupyter.headers, timeout=30)

    # A terminal someone typed in since the last pass is activity too.
    name = requests.post(jupyter.url("api/terminals"), headers=jupyter.headers, timeout=30).json()["name"]
    type_in_terminal(jupyter, name, "still-here")
    later = late + timedelta(minutes=30)
    assert culler.cull_idle_notebooks(now=later) == {"warned": 0, "stopped": 0}
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.RUNNING
    assert nb.last_activity == later

    # Nothing happens any more: past the timeout it is stopped, saying why, and the owner is told.
    assert culler.cull_idle_notebooks(now=later + timedelta(minutes=6)) == {"warned": 0, "stopped": 1}
    nb = wait_for(nb, Notebook.Status.STOPPED)
    assert nb.reason == "stopped after 6 minutes idle"
    stopped = Notification.objects.filter(user=alice).latest("pk")
    assert "stopped after 6 minutes idle" in stopped.message
    assert "files are kept" in stopped.message
