"""Canonical people: alice owns project A, bob is a member of A, charlie owns project B and is an outsider to A."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from apps.models.mlflow_api.asgi import close_api_connections
from apps.projects.models import Role
from portal.lib.serve import serve_in_thread
from tests.factories import PASSWORD, ProjectFactory, UserFactory, add_member, make_token


def pytest_configure() -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Each test process keeps its own cache (rate-limit counters): a Redis cache would be shared by the xdist
    # workers, and clearing it (below) is FLUSHDB, which would take the broker's and channel layer's keys too.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, request) -> Iterator[None]:
    """pytest-django's test databases; where a collected test is transactional, those end by putting back the rows
    a flush leaves rather than by flushing (tests/dbreset.py: the same state, seconds sooner per test)."""
    from tests import dbreset

    if not any(_is_transactional(item) for item in request.session.items):
        yield
        return
    with django_db_blocker.unblock():
        dbreset.install()
    yield
    dbreset.uninstall()


def _is_transactional(item: pytest.Item) -> bool:
    """Whether pytest-django runs the test as a TransactionTestCase (its own rule, in _django_db_helper)."""
    names = getattr(item, "fixturenames", ())
    if {"transactional_db", "live_server", "django_db_reset_sequences"} & set(names):
        return True
    marker = item.get_closest_marker("django_db")
    if marker is None:
        return False
    transaction = marker.kwargs.get("transaction", marker.args[0] if marker.args else False)
    return bool(transaction or marker.kwargs.get("reset_sequences"))


@dataclass
class World:
    alice: object
    bob: object
    charlie: object
    project_a: object
    project_b: object


@pytest.fixture(autouse=True)
def _loopback_is_reachable(settings) -> None:
    """The webhook receivers and LLM servers tests start listen on loopback, which a production portal refuses for
    URLs users type (portal/lib/outbound.py); tests/alerts/test_webhook_addresses.py checks the refusal itself."""
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]


@pytest.fixture(autouse=True)
def _forget_seen_agents() -> None:
    """The runtimes remember for a quarter of a second that they saw a live agent (or cluster): a test that starts
    right after one whose agent heartbeated must not inherit it ("no agent runs" tests read 'deploying')."""
    from apps.runtime.kubernetes import runtime as kubernetes_runtime
    from apps.runtime.local import runtime as local_runtime

    local_runtime._ready_at = float("-inf")
    kubernetes_runtime._ready_at = float("-inf")


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Rate-limit counters live in the cache, which a test's rolled-back transaction does not reset: each test
    starts with none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def world(db) -> World:
    alice = UserFactory(username="alice")
    bob = UserFactory(username="bob")
    charlie = UserFactory(username="charlie")
    project_a = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    add_member(project_a, bob, Role.EDITOR)
    project_b = ProjectFactory(owner=charlie, slug="project-b", name="Project B")
    return World(alice, bob, charlie, project_a, project_b)


@pytest.fixture
def api() -> APIClient:
    return APIClient()


def user_client(user) -> APIClient:
    """An API client signed in as `user` (session-less: DRF's force_authenticate)."""
    client = APIClient()
    client.force_authenticate(user)
    return client


def role_of(project, user) -> int | None:
    from apps.projects.models import Membership

    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


def token_client(user, **token_kwargs) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user, **token_kwargs)}")
    return client


@pytest.fixture
def password() -> str:
    return PASSWORD


def database_url_of_test_db() -> str:
    """A DATABASE_URL that points a subprocess (worker, agent) at the test database."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@dataclass
class LiveServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"


@pytest.fixture
def live_asgi(transactional_db) -> Iterator[LiveServer]:
    """The real ASGI application (HTTP + websockets) served by uvicorn in a thread on loopback."""
    server, port, thread = serve_in_thread()
    yield LiveServer("127.0.0.1", port)
    server.should_exit = True
    thread.join(timeout=5)
    close_api_connections()  # the MLflow API's threads keep theirs between requests: not past the test database
