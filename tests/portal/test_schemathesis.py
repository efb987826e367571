"""The API fuzzed against its own OpenAPI schema (schemathesis): no 5xx, and responses match the schema.

Every operation of `/api/v1/schema/` gets generated requests (valid and invalid) sent as a project owner's token
(alice, owner of project-a) through the WSGI application in-process. Bounded for CI: PORTAL_SCHEMATHESIS_EXAMPLES
examples per operation (`make security` sets 5; unset, the module is skipped). Checks: no server error, the
response body matches the documented schema of its status, and the documented content type. Undocumented
statuses (401/403/404/429…) are not errors here: the access matrix and the cross-tenant probe assert those.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from apps.projects.models import Role
from tests.factories import add_member, make_token

EXAMPLES = int(os.environ.get("PORTAL_SCHEMATHESIS_EXAMPLES", "0"))
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]

# A few minutes of requests: run by `make security` (and so by CI), which sets PORTAL_SCHEMATHESIS_EXAMPLES.
pytestmark = [
    pytest.mark.schemathesis,
    pytest.mark.skipif(EXAMPLES < 1, reason="set PORTAL_SCHEMATHESIS_EXAMPLES (make security does)"),
]
# Upload chunks (PATCH /dataset-upload-files/{id}/) are raw bytes under their tus-style media type.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """The WSGI handler closes database connections at each request's end, which would close the test's
    transaction; Django's test client disconnects the same signal handler for the same reason."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def owner_headers(world) -> dict[str, str]:
    """A project owner's token (alice owns project-a, where charlie is a viewer)."""
    add_member(world.project_a, world.charlie, Role.VIEWER)
    cache.clear()  # token-creation rate counts from earlier tests
    return {"Authorization": f"Bearer {make_token(world.alice)}"}


# Loaded at collection, through the app (the schema view needs no database): schemathesis' lazy
# `from_fixture` loader does not run under pytest 9.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())


@schema.parametrize()
@settings(
    max_examples=max(EXAMPLES, 1),  # the module is skipped at 0
    deadline=None,
    derandomize=True,  # the same examples in every CI run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_schema(case, owner_headers):
    case.call_and_validate(headers=owner_headers, checks=CHECKS)
