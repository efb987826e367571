"""The client address that login lockouts, rate limits and the audit log count by comes from the peer, or from the
X-Forwarded-For of a trusted proxy (PORTAL_TRUSTED_PROXIES) — never from a header any client can write (issue 27)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from portal.lib.clientaddr import ClientAddressMiddleware, client_address, parse_networks

LOGIN_URL = reverse("accounts:login")
ROOT = Path(settings.BASE_DIR)


pytestmark = pytest.mark.usefixtures("fresh_rate_counts")


def _post(client: Client, password: str, peer: str, forwarded: str | None = None):
    headers = {"x-forwarded-for": forwarded} if forwarded else {}
    return client.post(LOGIN_URL, {"username": "alice", "password": password}, REMOTE_ADDR=peer, headers=headers)


@override_settings(AXES_FAILURE_LIMIT=5, PORTAL_LOGIN_RATE="1000/minute", PORTAL_TRUSTED_PROXIES=[])
def test_rotating_forwarded_for_does_not_escape_the_lockout(world, password):
    client = Client()
    statuses = [_post(client, "wrong", "10.9.0.1", f"203.0.113.{n}").status_code for n in range(25)]
    after = _post(client, password, "10.9.0.1", "198.51.100.7")

    assert statuses[:4] == [200] * 4
    assert set(statuses[4:]) == {429}  # locked from the fifth failure on, whatever the header said
    assert after.status_code == 429
    assert SESSION_KEY not in client.session


@override_settings(PORTAL_LOGIN_RATE="3/minute", PORTAL_TRUSTED_PROXIES=[])
def test_rotating_forwarded_for_does_not_escape_the_login_rate_limit(world):
    statuses = [
        Client().post(LOGIN_URL, {"username": f"u{n}", "password": "x"}, REMOTE_ADDR="10.9.1.1",
                      headers={"x-forwarded-for": f"203.0.113.{n}"}).status_code
        for n in range(5)
    ]  # fmt: skip

    assert statuses == [200, 200, 200, 429, 429]


@override_settings(AXES_FAILURE_LIMIT=3, PORTAL_LOGIN_RATE="1000/minute")
def test_a_trusted_proxys_forwarded_for_is_the_client(world, password):
    with override_settings(PORTAL_TRUSTED_PROXIES=parse_networks(["10.8.0.0/16"])):
        failures = [_post(Client(), "wrong", "10.8.3.4", "203.0.113.9").status_code for _ in range(3)]
        locked = _post(Client(), password, "10.8.7.7", "203.0.113.9")  # another replica of the proxy
        other_client = _post(Client(), password, "10.8.3.4", "203.0.113.10")

    assert failures == [200, 200, 429]
    assert locked.status_code == 429  # the same client, wherever the proxy forwarded it from
    assert other_client.status_code == 302  # other clients behind the same proxy are not locked out


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("192.0.2.1", "203.0.113.5", "192.0.2.1"),  # not a proxy: the header is the client's own words
        ("10.0.0.2", "203.0.113.5", "203.0.113.5"),
        ("10.0.0.2", "6.6.6.6, 203.0.113.5", "203.0.113.5"),  # what the client wrote first is skipped
        ("10.0.0.2", "6.6.6.6, 203.0.113.5, 10.0.0.9", "203.0.113.5"),  # a chain of trusted proxies
        ("10.0.0.2", "10.0.0.7, 10.0.0.9", "10.0.0.7"),  # only proxies: the farthest one
        ("10.0.0.2", "not an address", "10.0.0.2"),  # garbage from a proxy: its own address
        ("10.0.0.2", "", "10.0.0.2"),
        ("::ffff:10.0.0.2", "2001:db8::1", "2001:db8::1"),  # IPv4-mapped peer, IPv6 client
    ],
)
def test_client_address(peer, forwarded, expected):
    trusted = parse_networks(["10.0.0.0/24", "::ffff:10.0.0.0/120"])
    assert client_address(peer, forwarded, trusted) == expected


def test_the_middleware_rewrites_the_address_once_and_keeps_the_peer():
    seen = {}

    def view(request):
        seen.update(addr=request.META["REMOTE_ADDR"], peer=request.META["PORTAL_PEER_ADDR"])

    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.2", headers={"x-forwarded-for": "203.0.113.5"})
    with override_settings(PORTAL_TRUSTED_PROXIES=parse_networks(["10.0.0.2"])):
        ClientAddressMiddleware(view)(request)

    assert seen == {"addr": "203.0.113.5", "peer": "10.0.0.2"}


def test_bad_trusted_proxies_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"PORTAL_TRUSTED_PROXIES: '10\.0\.0\.300'"):
        parse_networks(["10.0.0.0/8", "10.0.0.300"])


def test_no_server_command_honours_forwarded_headers_of_its_own():
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 by default (and from anyone with `--forwarded-allow-ips *`):
    every command that starts the web server turns that off, so the portal's setting is the only one."""
    procfile_web = next(line for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("web:"))
    dockerfile_cmd = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD"))
    web_yaml = (ROOT / "k8s/base/web.yaml").read_text()
    web_command = re.search(r'command: \["uvicorn".*?\]', web_yaml, re.S).group(0)

    for command in (procfile_web, dockerfile_cmd, web_command):
        assert "--no-proxy-headers" in command, command
        assert "forwarded-allow-ips" not in command, command
