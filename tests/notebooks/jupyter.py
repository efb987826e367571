"""A real JupyterLab for the proxy tests: started once per session on a free loopback port, stopped by PID.

It runs with the base URL the proxy expects of notebook `JUPYTER_PK` (`/notebook/<pk>/`), so a test makes the
Notebook row with that pk (`running_notebook()`), pointing at this server. Its Jupyter folders (runtime, config,
data, IPython) live in a temporary folder: nothing is read from or written to the home directory.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.notebooks.models import Notebook
from portal.lib.serve import free_port

JUPYTER_PK = 424242  # far above the ids a test database hands out, so no other notebook collides with it
READY_TIMEOUT = 90.0


@dataclass
class JupyterServer:
    pk: int
    url: str  # base URL without path, as Notebook.upstream holds it
    token: str
    root: Path  # the server's root_dir: files written here appear in the contents API
    process: subprocess.Popen

    @property
    def base_path(self) -> str:
        return f"/notebook/{self.pk}/"

    def direct(self) -> httpx.Client:
        """A client that talks to the server itself, bypassing the proxy (to check what the proxy did)."""
        return httpx.Client(
            base_url=self.url + self.base_path.rstrip("/"), headers={"Authorization": f"token {self.token}"}
        )


def start_jupyter(folder: Path, pk: int = JUPYTER_PK) -> JupyterServer:
    python = settings.PORTAL_TASK_ENVS["notebook"]
    if not Path(python).exists():
        pytest.skip(f"no notebook environment at {python} (`make test` builds .venv-notebook)")
    root, home = folder / "root", folder / "jupyter"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(24)
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    command = [
        python, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.base_url=/notebook/{pk}/", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = (folder / "jupyter.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = JupyterServer(pk, f"http://127.0.0.1:{port}", token, root, process)
    deadline = time.monotonic() + READY_TIMEOUT
    with server.direct() as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {(folder / 'jupyter.log').read_text()[-3000:]}")
            try:
                if client.get("/api/status", timeout=2).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                stop_jupyter(server)
                raise RuntimeError("JupyterLab did not answer in time")
            time.sleep(0.2)


def stop_jupyter(server: JupyterServer) -> None:
    """SIGTERM to the server's own process group (it shuts its kernels down), SIGKILL if it lingers."""
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=5)


@pytest.fixture(scope="session")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterServer]:
    server = start_jupyter(tmp_path_factory.mktemp("jupyter"))
    yield server
    stop_jupyter(server)


def running_notebook(server: JupyterServer, project, owner, **fields) -> Notebook:
    """The Notebook row of `server` (status RUNNING, upstream and token set), in `project`, owned by `owner`."""
    values = {
        "name": "lab",
        "status": Notebook.Status.RUNNING,
        "upstream": server.url,
        "token": server.token,
        "runtime": "local",
        **fields,
    }
    return Notebook.objects.create(pk=server.pk, project=project, owner=owner, **values)
