"""The live notification count over a real websocket, served by uvicorn through the real channel layer."""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.accounts.services import mark_read, notify
from tests.factories import UserFactory

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def open_socket(live, user=None):
    headers = {"Origin": live.url}
    if user is not None:
        headers["Cookie"] = session_cookie(user)
    return connect(f"{live.ws_url}/ws/notifications/", additional_headers=headers, open_timeout=30)


def receive(ws, timeout: float = 30.0) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def test_it_sends_the_unread_count_on_connect_and_on_every_change(live_asgi):
    user = UserFactory(username="alice")
    notify(user, "first")
    with open_socket(live_asgi, user) as ws:
        assert receive(ws) == {"unread": 1}
        notify(user, "second")
        assert receive(ws) == {"unread": 2}
        mark_read(user)
        assert receive(ws) == {"unread": 0}


def test_another_users_notifications_do_not_reach_me(live_asgi):
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    with open_socket(live_asgi, alice) as ws:
        assert receive(ws) == {"unread": 0}
        notify(bob, "for bob only")
        notify(alice, "for alice")
        assert receive(ws) == {"unread": 1}


def test_anonymous_socket_is_closed_with_4401(live_asgi):
    with open_socket(live_asgi) as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4401


def test_an_idle_socket_survives_past_the_5_s_read_timeout_and_still_receives(live_asgi):
    """redis-py 8's 5 s socket_timeout used to close idle websockets (channels_redis#422)."""
    user = UserFactory(username="alice")
    with open_socket(live_asgi, user) as ws:
        assert receive(ws) == {"unread": 0}
        time.sleep(6)  # past the 5 s (a busy machine only makes the pause longer)
        notify(user, "after a quiet spell")
        assert receive(ws) == {"unread": 1}
