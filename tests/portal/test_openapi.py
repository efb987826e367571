from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from openapi_spec_validator import validate
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.smoke

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE)


@pytest.fixture
def signed_in(db):
    client = APIClient()
    client.force_login(UserFactory(username="alice"))
    return client


def test_schema_is_valid_openapi_3_and_documents_every_endpoint(signed_in):
    response = signed_in.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    spec = response.json()
    validate(spec)
    assert spec["openapi"].startswith("3.")
    for path in ["/api/v1/projects/", "/api/v1/projects/{slug}/transfer/", "/api/v1/memberships/", "/api/v1/tokens/"]:
        assert path in spec["paths"], path
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token from /accounts/tokens/ (also accepted as `Authorization: Token <t>`).",
    }
    assert "cookieAuth" in schemes


def test_schema_generation_has_no_warnings(tmp_path):
    """Every view's types are known to drf-spectacular: the schema documents reality, not guesses."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    assert "/api/v1/memberships/{id}/" in (tmp_path / "schema.yaml").read_text()


def test_swagger_ui_loads_only_local_assets(signed_in):
    response = signed_in.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    assert not EXTERNAL.findall(html), EXTERNAL.findall(html)
    for asset in re.findall(r"""(?:src|href)=["']([^"']+)["']""", html):
        if asset.startswith("/static/"):
            assert signed_in.get(asset).status_code == 200, asset


@pytest.mark.django_db
def test_no_page_loads_an_asset_from_outside(client, world):
    client.force_login(world.alice)
    pages = [
        "/",
        "/p/new/",
        "/p/project-a/",
        "/p/project-a/members/",
        "/p/project-a/settings/",
        "/accounts/profile/",
        "/accounts/tokens/",
        "/accounts/notifications/",
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not EXTERNAL.findall(html), (url, EXTERNAL.findall(html))
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    for url in ["/admin/", "/admin/projects/project/", f"/admin/projects/project/{world.project_a.pk}/change/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert not EXTERNAL.findall(response.content.decode()), url
    client.logout()
    html = client.get("/accounts/login/").content.decode()
    assert not EXTERNAL.findall(html)


def test_the_filters_keep_their_names_after_the_api_schema_is_built(world, client):
    """drf-spectacular reads the FilterSets' class-level filters for the schema, building their form fields without
    the model (so without a label); a page rendered afterwards still names its filter ('Status: any', not 'None')."""
    api = APIClient()
    api.force_login(world.alice)
    assert api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").status_code == 200
    client.force_login(world.alice)

    html = client.get("/p/project-a/services/").content.decode()

    assert '<option value="" selected>Status: any</option>' in html
    assert "None: any" not in html
