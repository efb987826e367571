"""Labeling tests run against a real Label Studio: one server per test session (its own data folder under the
session's tmp folder, a free loopback port), started the way `manage.py runlabelstudio` starts it and stopped by
its process group id. Without `.venv-labelstudio` (`make labelstudio-env`) the tests that need it skip, saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from apps.labeling import launch
from portal.lib.serve import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 600  # the first start migrates a new SQLite database: ~45-90 s on a busy 2-core host


@dataclass
class LabelStudioHandle:
    url: str
    token: str
    email: str
    log: Path
    local: launch.LocalServer
    process: subprocess.Popen

    def stop(self) -> None:
        """Stop the real server (its process group), as an outage would."""
        _stop(self.process)

    def start(self) -> None:
        """Start it again on the same data folder and port (same token): a later start takes ~5-60 s."""
        with self.log.open("ab") as out:
            self.process = self.local.start(stdout=out)
        launch.wait_ready(self.url, self.token, timeout=START_TIMEOUT, process=self.process)


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory) -> Iterator[LabelStudioHandle]:
    venv = Path(django_settings.LABEL_STUDIO_VENV)
    if not (venv / "bin" / "label-studio").exists():
        pytest.skip(f"no Label Studio venv at {venv}: run `make labelstudio-env`")
    root = tmp_path_factory.mktemp("labelstudio")
    local = launch.LocalServer(
        venv=venv,
        data_dir=root / "data",
        port=free_port(),
        email="portal-tests@labelstudio.local",
        password=launch.new_token(),
        token=launch.new_token(),
    )
    log = root / "server.log"
    with log.open("wb") as out:
        process = local.start(stdout=out)
    try:
        launch.wait_ready(local.url, local.token, timeout=START_TIMEOUT, process=process)
    except Exception as exc:
        _stop(process)
        pytest.fail(f"Label Studio did not start: {exc}\n{log.read_text()[-3000:]}")
    handle = LabelStudioHandle(local.url, local.token, local.email, log, local, process)
    yield handle
    _stop(handle.process)


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture
def ls(settings, label_studio: LabelStudioHandle) -> LabelStudioHandle:
    """The portal pointed at the session's server (as LABEL_STUDIO_URL + token would)."""
    settings.LABELING = "on"
    settings.LABEL_STUDIO_URL = label_studio.url
    settings.LABEL_STUDIO_TOKEN = label_studio.token
    settings.LABELING_PORTAL_URL = "http://portal.test"
    return label_studio


@pytest.fixture(autouse=True)
def blob_store(settings, tmp_path) -> Path:
    """Blobs under this test's tmp_path (as the datasets tests keep theirs)."""
    settings.STORAGES = {
        **django_settings.STORAGES,
        "datasets": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "store"},
        },
    }
    return tmp_path / "store"


class ModelServer:
    """apps.serving.modelserver as a subprocess on a free port (it prints the port in its banner)."""

    def __init__(self, model: Path, name: str) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "apps.serving.modelserver", "--name", name, "--model", str(model), "--port", "0"],
            cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=self.log, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline()
        if "http://" not in line:
            self.stop()
            raise RuntimeError(f"the model server did not start: {line}")
        self.url = "http://" + line.split("http://", 1)[1].split()[0]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


PNG = b"\x89PNG\r\n\x1a\n"


def choice(value: str) -> list[dict]:
    """The result of picking `value` in an image classification config (from_name "label", to_name "image")."""
    return [{"from_name": "label", "to_name": "image", "type": "choices", "value": {"choices": [value]}}]


@pytest.fixture
def labeling(world, ls):
    """An image classification labeling project of project A over three images, labels a and b."""
    from apps.labeling.services import create_labeling_project
    from tests import factories

    version = factories.dataset_version(
        factories.dataset(world.project_a, world.alice), {f"{i}.png": PNG for i in range(3)}
    )
    return create_labeling_project(
        world.project_a, world.alice, name="d", dataset_version=version, kind="image_classification", labels=["a", "b"]
    )
