"""The tokens page and list: the person's own live tokens by default; the ones the platform mints for each task
attempt and notebook, and revoked or expired ones, on request — with the same parameters on the page and the API."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token, new_task_token, revoke_token
from tests.conftest import user_client


@pytest.fixture
def tokens(world):
    create_token(world.alice, name="laptop")
    old, _ = create_token(world.alice, name="old-ci")
    revoke_token(old)
    lapsed, _ = create_token(world.alice, name="lapsed")
    ApiToken.objects.filter(pk=lapsed.pk).update(expires_at=timezone.now() - timedelta(days=1))
    minted, _ = new_task_token(world.alice, name="run 7 task train#1", project=world.project_a, days=1)
    minted.save()
    create_token(world.bob, name="bobs")
    return world


def names(response) -> list[str]:
    return sorted(t.name for t in response.context["listing"].page.object_list)


def test_minted_tokens_are_marked_as_such(tokens):
    assert ApiToken.objects.get(name="run 7 task train#1").kind == ApiToken.Kind.WORKLOAD
    assert ApiToken.objects.get(name="laptop").kind == ApiToken.Kind.PERSONAL


def test_the_page_shows_ones_own_live_tokens_by_default(tokens, client):
    client.force_login(tokens.alice)

    response = client.get("/accounts/tokens/")

    assert response.status_code == 200
    assert names(response) == ["laptop"]
    assert "show every token" in response.content.decode()


def test_the_page_shows_every_token_when_asked(tokens, client):
    client.force_login(tokens.alice)

    every = client.get("/accounts/tokens/", {"kind": "", "state": ""})
    minted = client.get("/accounts/tokens/", {"kind": "workload"})
    revoked = client.get("/accounts/tokens/", {"state": "revoked", "kind": ""})

    assert names(every) == ["lapsed", "laptop", "old-ci", "run 7 task train#1"]
    assert "minted" in every.content.decode()
    assert names(minted) == ["run 7 task train#1"]
    assert names(revoked) == ["old-ci"]


def test_the_api_reads_the_same_parameters_and_lists_everything_unless_told(tokens):
    api = user_client(tokens.alice)

    def listed(**params) -> list[str]:
        response = api.get("/api/v1/tokens/", params)
        assert response.status_code == 200, response.content
        return sorted(row["name"] for row in response.json()["results"])

    assert listed() == ["lapsed", "laptop", "old-ci", "run 7 task train#1"]
    assert listed(kind="personal", state="active") == ["laptop"]
    assert listed(state="expired") == ["lapsed"]
    assert listed(kind="workload") == ["run 7 task train#1"]
    assert api.get("/api/v1/tokens/", {"kind": "workload"}).json()["results"][0]["kind"] == "workload"


def test_a_bad_kind_is_a_400_on_the_api_and_a_form_error_on_the_page(tokens, client):
    client.force_login(tokens.alice)

    page = client.get("/accounts/tokens/", {"kind": "robot"})
    api = user_client(tokens.alice).get("/api/v1/tokens/", {"state": "sleeping"})

    assert page.status_code == 400
    assert "robot" in page.context["listing"].form.errors["kind"][0]
    assert "laptop" not in [t.name for t in page.context["listing"].page.object_list]
    assert api.status_code == 400
    assert list(api.json()) == ["state"]
