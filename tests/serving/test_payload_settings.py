"""Payload logging settings of a service through the API and the edit page: stored, shown, bad values a 400 naming
the field."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.serving import payloads
from apps.serving.services import create_service
from tests import factories
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(world):
    model = factories.registered_model(world.project_a, "iris-classifier")
    return create_service(
        world.project_a, world.alice, name="iris", allow_waiting=True, registered_model=model, follow_alias="staging"
    )


def test_the_api_sets_payload_logging(world, service):
    client = user_client(world.bob)

    response = client.patch(
        f"/api/v1/services/{service.pk}/",
        {"payload_log_percent": 25, "payload_log_max_kb": 8, "payload_log_keep": 500},
        format="json",
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["payload_log_percent"], body["payload_log_max_kb"], body["payload_log_keep"]) == (25, 8, 500)
    service.refresh_from_db()
    assert service.payload_log_percent == 25


@pytest.mark.parametrize(
    ("field", "value"), [("payload_log_percent", 101), ("payload_log_max_kb", 0), ("payload_log_keep", 0)]
)
def test_out_of_range_values_are_a_400_naming_the_field(world, service, field, value):
    response = user_client(world.bob).patch(f"/api/v1/services/{service.pk}/", {field: value}, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_the_edit_page_takes_the_settings_and_the_detail_page_says_so(world, service):
    browser = Client()
    browser.force_login(world.bob)
    edit = reverse("serving:service-edit", kwargs={"project": "project-a", "pk": service.pk})
    form = browser.get(edit).context["form"]
    data = {k: v for k, v in form.initial.items() if v is not None}

    bad = browser.post(edit, {**data, "payload_log_percent": "150"})
    assert bad.status_code == 200  # the service pages re-render their form with its errors
    assert bad.context["form"].errors["payload_log_percent"] == ["Give a whole number from 0 to 100."]

    assert browser.post(edit, {**data, "payload_log_percent": "10"}).status_code == 302
    page = browser.get(reverse("serving:service-detail", kwargs={"project": "project-a", "pk": service.pk}))
    text = page.content.decode()
    assert "10 % of inference requests are logged" in text
    assert "No ground truth yet" in text


def test_secret_looking_keys_and_headers_are_redacted():
    body = b'{"inputs": [], "parameters": {"api_key": "s", "max_tokens": 5, "deep": [{"db_password": "s"}]}}'

    kept = payloads.body_text(body, 1 << 16)

    assert '"api_key":"[redacted]"' in kept
    assert '"db_password":"[redacted]"' in kept
    assert '"max_tokens":5' in kept
    assert payloads.body_text(b'{"inputs": [1]}', 1 << 16) == '{"inputs": [1]}'  # nothing secret: kept as sent
    assert payloads.body_text(b"x" * 10, 5) == ""
    assert payloads.header_dict([(b"x-auth-thing", b"s"), (b"accept", b"a")]) == {
        "x-auth-thing": "[redacted]", "accept": "a",
    }  # fmt: skip
