"""The API fuzzed against its own OpenAPI schema (schemathesis): no 5xx, and responses match the schema.

Every operation of `/api/v1/schema/` gets generated requests sent as a project owner's token (alice, owner of
project-a) through the WSGI application in-process, in schemathesis' phases:

- examples, coverage and fuzzing, per operation (`test_api_conforms_to_its_schema`): the coverage phase sends the
  boundary cases of each schema deterministically (every optional field missing, nulls, wrong types, each media
  type: an empty multipart PATCH, a multipart `env=null`), positive and negative generation alike;
- stateful (`test_api_workflows_conform_to_its_schema`): scenarios that chain operations through the links
  schemathesis infers (POST a membership, then PATCH/DELETE *that* id; register a model, serve it, delete it),
  reaching the objects that random ids never hit.

Bounded for CI: PORTAL_SCHEMATHESIS_EXAMPLES fuzzed examples per operation and PORTAL_SCHEMATHESIS_SCENARIOS
scenarios of up to PORTAL_SCHEMATHESIS_STEPS steps (`make security` sets them; without the first, the module is
skipped). Checks: no server error, the response body matches the documented schema of its status, and the
documented content type. Undocumented statuses (401/403/404/429…) are not errors here: the access matrix and
the cross-tenant probe assert those.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from apps.projects.models import Role
from tests.factories import add_member, make_token

EXAMPLES = int(os.environ.get("PORTAL_SCHEMATHESIS_EXAMPLES", "0"))
SCENARIOS = int(os.environ.get("PORTAL_SCHEMATHESIS_SCENARIOS", "0"))
STEPS = int(os.environ.get("PORTAL_SCHEMATHESIS_STEPS", "10"))
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]

# A few minutes of requests: run by `make security` (and so by CI), which sets PORTAL_SCHEMATHESIS_EXAMPLES.
if EXAMPLES < 1 and SCENARIOS < 1:
    # Skipped before the schema is loaded: building the ~250 per-operation tests (schemathesis draws each one's
    # coverage cases at collection) took each process of `make test` 15-80 s only to skip them all.
    pytest.skip("set PORTAL_SCHEMATHESIS_EXAMPLES (make security does)", allow_module_level=True)
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


def in_a_project(case) -> None:
    """Bodies that name a project name alice's: a generated slug is never one she can see, so every create would
    stop at "no such project" and nothing behind it (the fields a NOT NULL column takes, the services) would be
    reached. A missing or null `project` is asserted by the API tests (tests/portal/test_api_write_contract.py)."""
    if isinstance(case.body, dict) and "project" in case.body:
        case.body["project"] = "project-a"


@pytest.fixture
def owner_headers(world) -> dict[str, str]:
    """A project owner's token (alice owns project-a, where charlie is a viewer)."""
    add_member(world.project_a, world.charlie, Role.VIEWER)
    cache.clear()  # token-creation rate counts from earlier tests
    return {"Authorization": f"Bearer {make_token(world.alice)}"}


# Loaded at collection, through the app (the schema view needs no database): schemathesis' lazy
# `from_fixture` loader does not run under pytest 9.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())
# Said rather than inherited from schemathesis' defaults: these phases and modes are what finds the class of 500s
# that the default run of a few fuzzed examples missed (nulls and omissions in multipart bodies, acting on ids that
# exist).
for phase in ("examples", "coverage", "fuzzing", "stateful"):
    schema.config.phases.get_by_name(name=phase).enabled = True
assert {mode.value for mode in schema.config.generation.modes} == {"positive", "negative"}


@schema.parametrize()
@settings(
    max_examples=max(EXAMPLES, 1),  # the module is skipped at 0
    deadline=None,
    derandomize=True,  # the same examples in every CI run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_schema(case, owner_headers):
    in_a_project(case)
    case.call_and_validate(headers=owner_headers, checks=CHECKS)


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    """Scenarios through the inferred links, with the owner's token and the same checks as above."""

    headers: dict[str, str] = {}

    def setup(self) -> None:
        # Every scenario starts from the same database (the test's world): Hypothesis replays choices it made
        # before, and rows left by an earlier scenario would make the same choices draw other steps ("flaky").
        self.savepoint = transaction.savepoint()

    def teardown(self) -> None:
        transaction.savepoint_rollback(self.savepoint)

    def before_call(self, case) -> None:
        in_a_project(case)

    def get_call_kwargs(self, case) -> dict:
        return {"headers": self.headers}

    def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
        case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)


@pytest.mark.skipif(SCENARIOS < 1, reason="set PORTAL_SCHEMATHESIS_SCENARIOS (make security does)")
def test_api_workflows_conform_to_its_schema(owner_headers):
    Workflow.headers = owner_headers
    run_state_machine_as_test(
        Workflow,
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
