"""Canonical people: alice owns project A, bob is a member of A, charlie owns project B and is an outsider to A."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from apps.projects.models import Role
from portal.lib.serve import serve_in_thread
from tests.factories import PASSWORD, ProjectFactory, UserFactory, add_member, make_token


def pytest_configure() -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Each test process keeps its own cache (rate-limit counters): a Redis cache would be shared by the xdist
    # workers, and clearing it (below) is FLUSHDB, which would take the broker's and channel layer's keys too.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


@dataclass
class World:
    alice: object
    bob: object
    charlie: object
    project_a: object
    project_b: object


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
