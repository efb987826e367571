"""Answers of the serving router carry the web app's security headers (issue 27): whether the router wrote them
(an error) or relayed a replica's, whose own values for those headers never come through."""

from __future__ import annotations

import httpx
import pytest

from apps.serving.router.asgi import invalidate
from tests.factories import make_token
from tests.serving import replicas as replica_fixtures
from tests.serving.replicas import add_revision, infer_body, make_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

iris_path = replica_fixtures.iris_path
replicas = replica_fixtures.replicas

EXPECTED = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
}


def assert_secured(response: httpx.Response) -> None:
    for name, value in EXPECTED.items():
        assert response.headers.get_list(name) == [value], (name, response.headers)


def test_relayed_and_refused_answers_carry_the_security_headers(world, replicas, live_asgi):
    service = make_service(world.project_a)
    service.current_revision = add_revision(service, 1, replicas[0])
    service.save()
    invalidate()
    url = f"{live_asgi.url}/serving/project-a/iris"
    token = {"Authorization": f"Bearer {make_token(world.alice)}"}

    served = httpx.post(f"{url}/v2/models/iris/infer", json=infer_body(), headers=token, timeout=30)
    metadata = httpx.get(f"{url}/v2/models/iris", headers=token, timeout=30)
    described = httpx.get(f"{url}/", headers=token, timeout=30)
    refused = httpx.post(f"{url}/v2/models/iris/infer", json=infer_body(), timeout=30)
    missing = httpx.get(f"{live_asgi.url}/serving/project-a/nope/v2", headers=token, timeout=30)

    assert [r.status_code for r in (served, metadata, described, refused, missing)] == [200, 200, 200, 401, 404]
    for response in (served, metadata, described, refused, missing):
        assert_secured(response)
