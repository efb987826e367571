"""Who may call a service through the router: tokens of members, the service key, public services, a member's
browser session with a same-origin check — and answers that never reveal whether a service exists."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.test import Client

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token, revoke_token
from apps.serving.models import InferenceService
from apps.serving.router.asgi import invalidate
from tests.factories import ProjectFactory, make_token
from tests.serving import replicas as replica_fixtures
from tests.serving.replicas import IRIS_CLASSES, add_revision, infer_body, make_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Session fixtures: the model-server processes (started once for every router test module).
iris_path = replica_fixtures.iris_path
replicas = replica_fixtures.replicas

PATH = "/serving/project-a/iris/v2/models/iris/infer"
KEY = InferenceService.generate_key()


@pytest.fixture
def service_for(world, replicas):
    def make(auth: str = "token") -> InferenceService:
        service = make_service(world.project_a, auth=auth, key=KEY)
        service.current_revision = add_revision(service, 1, replicas[0])
        service.save()
        invalidate()
        return service

    return make


@pytest.fixture
def call(live_asgi):
    def post(path: str = PATH, *, token: str | None = None, **headers: str) -> httpx.Response:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.post(live_asgi.url + path, json=infer_body(), headers=headers, timeout=30)

    return post


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def assert_served(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == IRIS_CLASSES


def test_members_tokens_are_served_read_scope_included(world, service_for, call):
    service_for("token")
    assert_served(call(token=make_token(world.alice)))
    assert_served(call(token=make_token(world.bob)))
    assert_served(call(token=make_token(world.bob, scope=ApiToken.Scope.READ, project=world.project_a)))


def test_missing_or_bad_credentials_are_401_with_a_challenge(world, service_for, call):
    service_for("token")
    for response in (call(), call(token="not-a-token"), call(Authorization="Basic YWxpY2U6eA==")):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Bearer realm="serving"'
        assert "token" in response.json()["error"]


def test_outsiders_and_other_projects_tokens_get_404(world, service_for, call):
    service_for("token")
    project_c = ProjectFactory(owner=world.alice, slug="project-c")
    for token in (make_token(world.charlie), make_token(world.alice, project=project_c)):
        response = call(token=token)
        assert response.status_code == 404
        assert response.json() == {"error": "No such service."}


def test_unknown_services_answer_like_forbidden_ones(world, service_for, call):
    service_for("token")
    alice = make_token(world.alice)
    assert call("/serving/project-a/nope/v2/models/iris/infer", token=alice).status_code == 404
    assert call("/serving/project-zz/iris/v2/models/iris/infer", token=alice).status_code == 404
    assert call("/serving/project-a/nope/v2/models/iris/infer").status_code == 401
    assert call("/serving/Not_A_Slug/x/v2/models/iris/infer").status_code == 401


def test_a_revoked_token_is_refused_once_the_cache_lets_go(world, service_for, call):
    service_for("token")
    token, raw = create_token(world.alice, name="ci")
    assert_served(call(token=raw))
    revoke_token(token)
    invalidate()  # instead of waiting PORTAL_SERVING_ROUTER_AUTH_TTL
    assert call(token=raw).status_code == 401


def test_the_service_key_opens_a_key_service_only(world, service_for, call):
    service = service_for("key")
    assert_served(call(token=KEY))
    assert_served(call(**{"X-Service-Key": KEY}))
    assert_served(call(token=make_token(world.bob)))  # members' tokens still work
    assert call(token=InferenceService.generate_key()).status_code == 401
    assert call(**{"X-Service-Key": "psk_wrong"}).status_code == 401
    assert call(token=make_token(world.charlie)).status_code == 404

    service.auth = InferenceService.Auth.TOKEN
    service.save()
    invalidate()
    assert call(token=KEY).status_code == 401


def test_a_public_service_needs_nothing(world, service_for, call):
    service_for("public")
    assert_served(call())


def test_a_members_session_may_call_from_the_portals_own_pages(world, service_for, call, live_asgi):
    service_for("token")
    cookie = session_cookie(world.bob)

    info = httpx.get(live_asgi.url + "/serving/project-a/iris/", headers={"Cookie": cookie})
    assert info.status_code == 200
    assert info.json()["service"] == "iris"
    assert_served(call(Cookie=cookie, Origin=live_asgi.url))
    assert_served(call(Cookie=cookie, Referer=live_asgi.url + "/p/project-a/serving/iris/"))
    assert call(Cookie=cookie, Origin="http://evil.example").status_code == 403
    assert call(Cookie=cookie, Origin="null").status_code == 403
    assert call(Cookie=cookie).status_code == 403  # neither Origin nor Referer
    assert call(Cookie=session_cookie(world.charlie), Origin=live_asgi.url).status_code == 404
    assert call(Cookie=f"{settings.SESSION_COOKIE_NAME}=garbage", Origin=live_asgi.url).status_code == 401


def test_a_host_outside_allowed_hosts_is_refused(world, service_for, call):
    service_for("public")
    assert call(Host="evil.example").status_code == 400
