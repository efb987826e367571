"""A whole portal for the SDK and the `portal` command to talk to: the ASGI app served by uvicorn (HTTP and
websockets), a real Celery worker on a broker of the test's own, and a real local agent that runs the tasks."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner, Result
from portal_client import Client
from portal_client.cli import main

from tests.conftest import LiveServer, World
from tests.factories import make_token, python_template
from tests.jobs.conftest import AgentProcess
from tests.outbox.conftest import private_broker, start_worker  # noqa: F401 - fixtures used below

pytestmark = [pytest.mark.live]


@dataclass
class Portal:
    live: LiveServer
    world: World

    @property
    def url(self) -> str:
        return self.live.url

    def client(self, user=None, **token_kwargs) -> Client:
        return Client(self.url, make_token(user or self.world.alice, **token_kwargs))


@pytest.fixture
def portal(live_asgi, world, tmp_path, settings, private_broker, start_worker) -> Iterator[Portal]:  # noqa: F811
    """The portal at `portal.url`, with alice (owner of project-a), bob (editor) and charlie (outsider), and the
    built-in template `py` (runs its `code` argument).

    As under `make run`, the web server, the worker and the agent share one broker (the test's own): what the agent
    queues (a model-server replica's readiness probe) reaches the worker. On Redis they share its key prefix, so the
    test server's channel layer is moved to that prefix too (the agent publishes log lines there)."""
    python_template()
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url  # where tasks reach the API
    private_broker.worker_env["SITE_URL"] = live_asgi.url
    if "REDIS_PREFIX" in private_broker.worker_env:
        layer = copy.deepcopy(settings.CHANNEL_LAYERS)
        layer["default"]["CONFIG"]["prefix"] = f"{private_broker.worker_env['REDIS_PREFIX']}:ws"
        settings.CHANNEL_LAYERS = layer
    agent = AgentProcess(tmp_path, env={**private_broker.worker_env, "MEDIA_ROOT": str(settings.MEDIA_ROOT)})
    agent.start()
    try:
        with private_broker.up():
            start_worker(private_broker)
            yield Portal(live_asgi, world)
    finally:
        agent.stop()


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    """The `portal` command's config folder, in the test's own place; no PORTAL_* from the environment."""
    folder = tmp_path / "config"
    monkeypatch.setenv("PORTAL_CONFIG_DIR", str(folder))
    for name in ("PORTAL_URL", "PORTAL_TOKEN", "PORTAL_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    return folder


@pytest.fixture
def cli(config_home):
    """Run `portal ARGS…` in this process (the HTTP still goes to the live server) → click's Result."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(main, list(args), input=input, env=env, catch_exceptions=False)

    return run
