"""A real local agent that knows where the API is, for the tests that drive an installed app to ready."""

from __future__ import annotations

import pytest

from tests.jobs.conftest import AgentProcess


@pytest.fixture
def api_agent(live_asgi, tmp_path, settings):
    """An agent told where the API is (tasks record their training and register models through it)."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url
    process = AgentProcess(tmp_path, env={"SITE_URL": live_asgi.url, "PORTAL_WORK_DIR": str(settings.PORTAL_WORK_DIR)})
    process.start()
    yield process
    process.stop()
