"""A project's live events (ws/projects/<slug>/events/) over a real websocket, served by uvicorn through the real
channel layer: the notebook and service pages follow them instead of polling.

alice owns project A, bob is a member of A, charlie owns project B and is no member of A.
"""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.notebooks import services as notebooks
from apps.projects.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import rollout, stop_service
from tests.notebooks.factories import notebook
from tests.serving.replicas import make_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def open_socket(live, slug: str = "project-a", user=None):
    headers = {"Origin": live.url}
    if user is not None:
        headers["Cookie"] = session_cookie(user)
    return connect(f"{live.ws_url}/ws/projects/{slug}/events/", additional_headers=headers, open_timeout=30)


def receive(ws, timeout: float = 10.0) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def joined(ws) -> None:
    """The consumer says so once it is in the project's group: what is published from now on arrives."""
    assert receive(ws) == {"type": "ready"}


def assert_quiet(ws, seconds: float = 1.0) -> None:
    with pytest.raises(TimeoutError):
        ws.recv(timeout=seconds)


def close_code(ws) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    return closed.value.rcvd.code


def rolling_out(service: InferenceService, number: int = 1) -> Replica:
    """Revision `number` of `service` rolling out, with one starting replica (nothing runs it)."""
    revision = Revision.objects.create(service=service, number=number, status=Revision.Status.ROLLING_OUT)
    InferenceService.objects.filter(pk=service.pk).update(status=InferenceService.Status.DEPLOYING)
    return Replica.objects.create(
        revision=revision, index=0, status=Replica.Status.STARTING, handle=f"h{number}", upstream="http://127.0.0.1:9"
    )


def test_a_member_hears_a_notebook_change_its_status(live_asgi, world):
    nb = notebook(world.project_a, world.alice, status="starting", handle="server-1")
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        assert notebooks.mark_running(nb.pk, "server-1")
        event = receive(ws)
    assert event["type"] == "notebook"
    assert (event["id"], event["status"], event["reason"]) == (nb.pk, "running", "")
    assert event["last_activity"]


def test_a_member_hears_a_service_roll_out_and_stop(live_asgi, world):
    service = make_service(world.project_a)
    replica = rolling_out(service)
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        assert rollout.mark_ready(replica.pk)  # the only replica is ready: the rollout completes
        event = receive(ws)
        assert event == {
            "type": "service", "id": service.pk, "status": "ready", "reason": "", "rolling": False, "settled": True,
        }  # fmt: skip

        rollout.advance(service.pk)  # what the periodic reconcile does: nothing changed, nothing is said
        assert_quiet(ws)

        stop_service(InferenceService.objects.get(pk=service.pk))
        event = receive(ws)
    assert (event["type"], event["id"], event["status"], event["settled"]) == ("service", service.pk, "stopped", True)


def test_a_rollout_in_progress_is_not_settled(live_asgi, world):
    service = make_service(world.project_a)
    rollout.mark_ready(rolling_out(service, 1).pk)
    second = Revision.objects.create(service=service, number=2, status=Revision.Status.ROLLING_OUT, desired_replicas=2)
    replicas = [
        Replica.objects.create(revision=second, index=i, status=Replica.Status.STARTING, handle=f"r2-{i}")
        for i in range(2)
    ]
    with open_socket(live_asgi, user=world.alice) as ws:
        joined(ws)
        rollout.mark_ready(replicas[0].pk)  # one of two: r1 keeps serving while r2 rolls out
        event = receive(ws)
    assert (event["status"], event["rolling"], event["settled"]) == ("deploying", True, False)


def test_another_projects_events_do_not_reach_me(live_asgi, world):
    theirs = notebook(world.project_b, world.charlie, status="starting", handle="theirs")
    mine = notebook(world.project_a, world.alice, status="starting", handle="mine")
    with open_socket(live_asgi, user=world.alice) as ws:
        joined(ws)
        notebooks.mark_running(theirs.pk, "theirs")
        notebooks.mark_running(mine.pk, "mine")
        assert receive(ws)["id"] == mine.pk  # the first event that arrives is of her own project


@pytest.mark.parametrize("slug", ["project-a", "no-such-project"])
def test_a_project_i_am_not_a_member_of_is_closed_with_4404(live_asgi, world, slug):
    with open_socket(live_asgi, slug, world.charlie) as ws:
        assert close_code(ws) == CLOSE_NOT_FOUND == 4404  # the same answer whether it exists or not


def test_anonymous_socket_is_closed_with_4401(live_asgi, world):
    with open_socket(live_asgi) as ws:
        assert close_code(ws) == CLOSE_UNAUTHENTICATED == 4401


def test_an_idle_socket_survives_past_the_5_s_read_timeout_and_still_receives(live_asgi, world):
    """redis-py 8's 5 s socket_timeout closed idle websockets (channels_redis#422): the layer's settings turn it off."""
    nb = notebook(world.project_a, world.bob, status="starting", handle="server-1")
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        time.sleep(6)  # past the 5 s (a busy machine only makes the pause longer)
        notebooks.mark_running(nb.pk, "server-1")
        assert receive(ws)["status"] == "running"
