"""The notebook admin: the token never shown; the stop action goes through the service (token revoked)."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.notebooks import services
from apps.notebooks.models import Notebook
from tests.factories import UserFactory
from tests.notebooks.factories import heartbeat_agent, notebook


@pytest.fixture(autouse=True)
def _work_dir(tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"


def test_a_superuser_sees_notebooks_without_their_token_and_stops_them(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    root = Client()
    root.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    page = root.get(f"/admin/notebooks/notebook/{nb.pk}/change/").content.decode()
    assert "eda" in page
    assert nb.token not in page

    response = root.post("/admin/notebooks/notebook/", {"action": "stop", "_selected_action": [nb.pk]}, follow=True)
    assert response.status_code == 200
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.STOPPED
    assert nb.reason == "stopped by an administrator"
    assert nb.api_token.revoked_at is not None
