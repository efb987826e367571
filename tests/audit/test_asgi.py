"""Under ASGI (uvicorn + Channels' router) the view runs in a sync_to_async thread: the entry is still written."""

from __future__ import annotations

import requests

from apps.audit.models import AuditEntry
from apps.projects.models import Project
from tests.factories import UserFactory, make_token


def test_an_api_write_over_asgi_is_recorded_once(live_asgi):
    user = UserFactory(username="asgi-user")
    headers = {"Authorization": f"Bearer {make_token(user)}"}
    response = requests.post(f"{live_asgi.url}/api/v1/projects/", json={"slug": "over-asgi", "name": "Over ASGI"},
                          headers=headers, timeout=20)  # fmt: skip
    assert response.status_code == 201, response.text
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.object_type, entry.actor) == ("create", "projects.project", user)
    assert entry.project == Project.objects.get(slug="over-asgi")
    assert entry.changes["name"] == [None, "Over ASGI"]
