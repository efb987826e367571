"""Following a run's log with an API token (`Authorization: Bearer` in the handshake), as `portal runs logs -f` does,
over a real websocket served by uvicorn."""

from __future__ import annotations

import json

import pytest
from websockets.sync.client import connect

from apps.jobs.logs import LogWriter, row_dict
from apps.jobs.models import PipelineRun, TaskRun
from tests.factories import ProjectFactory, make_token

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def open_socket(live, run: PipelineRun, authorization: str | None):
    headers = {"Origin": live.url}
    if authorization is not None:
        headers["Authorization"] = authorization
    return connect(f"{live.ws_url}/ws/runs/{run.pk}/logs/", additional_headers=headers, open_timeout=30)


def close_code(ws) -> int:
    """The application code the server closes with straight after accepting (4401, 4404)."""
    with pytest.raises(Exception):  # noqa: B017, PT011 - websockets' ConnectionClosed*, whichever side closed
        ws.recv(timeout=10)
    return ws.close_code


@pytest.fixture
def run(world) -> PipelineRun:
    run = PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=1)
    with LogWriter(TaskRun.objects.create(run=run, node="fit")) as writer:
        writer.write("0", "stdout", "stored before")
    return run


def test_a_bearer_token_gets_the_backlog_then_live_lines(live_asgi, world, run):
    with open_socket(live_asgi, run, f"Bearer {make_token(world.bob)}") as ws:
        message = json.loads(ws.recv(timeout=10))
        assert [row_dict(row)["text"] for row in message["rows"]] == ["stored before"]
        with LogWriter(run.tasks.get()) as writer:
            writer.write("0", "stdout", "live")
        while (message := json.loads(ws.recv(timeout=10)))["type"] != "lines":
            pass
        assert [row_dict(row)["text"] for row in message["rows"]] == ["live"]


@pytest.mark.parametrize("authorization", ["Bearer not-a-token", "Bearer", "Bearer a b"])
def test_a_wrong_token_is_closed_unauthenticated(live_asgi, world, run, authorization):
    with open_socket(live_asgi, run, authorization) as ws:
        assert close_code(ws) == 4401


def test_a_revoked_token_is_closed_unauthenticated(live_asgi, world, run):
    from apps.accounts.models import ApiToken

    raw = make_token(world.bob)
    ApiToken.objects.filter(user=world.bob).update(revoked_at="2020-01-01T00:00Z")
    with open_socket(live_asgi, run, f"Bearer {raw}") as ws:
        assert close_code(ws) == 4401


def test_other_tenants_and_tokens_of_other_projects_get_404(live_asgi, world, run):
    with open_socket(live_asgi, run, f"Bearer {make_token(world.charlie)}") as ws:
        assert close_code(ws) == 4404
    elsewhere = ProjectFactory(owner=world.bob, slug="bobs")
    with open_socket(live_asgi, run, f"Bearer {make_token(world.bob, project=elsewhere)}") as ws:
        assert close_code(ws) == 4404
    with open_socket(live_asgi, run, f"Bearer {make_token(world.bob, project=world.project_a)}") as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "lines"
