"""The notebook pages: the list with status, last activity and the owner's actions; the form; a notebook's page
with its live status, reason and log; who may act (members see, the owner acts, admins stop)."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from apps.notebooks.models import Notebook
from tests.notebooks.factories import heartbeat_agent, notebook


@pytest.fixture(autouse=True)
def _work_dir(tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"


def logged_in(client, user):
    client.force_login(user)
    return client


def row_of(html: str, pk: int) -> str:
    match = re.search(rf'<tr data-notebook="{pk}">(.*?)</tr>', html, re.S)
    assert match, f"no row for notebook {pk}"
    return match.group(1)


def test_the_list_shows_status_activity_and_only_the_owners_actions(world, client):
    running = notebook(world.project_a, world.alice, name="train", status="running", last_activity=timezone.now())
    stopped = notebook(world.project_a, world.bob, name="eda")

    html = logged_in(client, world.bob).get("/p/project-a/notebooks/").content.decode()
    alices, bobs = row_of(html, running.pk), row_of(html, stopped.pk)
    assert "train" in alices
    assert "alice" in alices
    assert 'data-status="running"' in alices
    assert "ago" in alices
    assert "0.5 CPU" in alices
    assert "0.5 CPU · 512Mi" in alices
    assert "/notebook/" not in alices
    assert "Stop" not in alices
    assert 'data-status="stopped"' in bobs
    assert f"/p/project-a/notebooks/{stopped.pk}/start/" in bobs
    assert "New notebook" in html

    html = logged_in(client, world.alice).get("/p/project-a/notebooks/").content.decode()
    alices = row_of(html, running.pk)
    assert f'href="/notebook/{running.pk}/lab" target="_blank"' in alices
    assert f"/p/project-a/notebooks/{stopped.pk}/stop/" not in html  # bob's is stopped: nothing to stop
    assert f"/p/project-a/notebooks/{stopped.pk}/delete/" in html  # an admin may delete it


def test_the_list_follows_the_projects_events_instead_of_polling(world, client):
    notebook(world.project_a, world.bob, status="starting")
    html = logged_in(client, world.bob).get("/p/project-a/notebooks/").content.decode()
    assert 'data-project-events="/ws/projects/project-a/events/"' in html
    assert 'data-live="notebook" data-live-url="/p/project-a/notebooks/"' in html
    assert "hx-trigger" not in html

    Notebook.objects.update(status="running")
    html = logged_in(client, world.bob).get("/p/project-a/notebooks/", HTTP_HX_REQUEST="true").content.decode()
    assert html.startswith('<div id="notebook-table"')  # the fragment live.js swaps in
    assert 'data-status="running"' in html


def test_the_form_shows_field_errors_and_creates(world, client):
    logged_in(client, world.bob)
    bad = client.post("/p/project-a/notebooks/new/", {"name": "Bad Name", "ide": "jupyterlab", "cpu": "x",
                                                       "memory": "2Gi", "gpu": "0"})  # fmt: skip
    assert bad.status_code == 400
    assert "Use 1–50 lowercase letters" in bad.content.decode()
    assert "Give a number" in bad.content.decode()

    response = client.post(
        "/p/project-a/notebooks/new/",
        {"name": "eda", "ide": "jupyterlab", "cpu": "0.5", "memory": "1Gi", "gpu": "0", "idle_timeout": "10"},
    )
    nb = Notebook.objects.get(name="eda")
    assert response.status_code == 302
    assert response["Location"] == f"/p/project-a/notebooks/{nb.pk}/"
    assert (nb.owner, nb.idle_timeout, nb.status) == (world.bob, 10, "stopped")


def test_create_and_start_without_an_agent_creates_and_says_why_it_did_not_start(world, client):
    logged_in(client, world.bob)
    response = client.post(
        "/p/project-a/notebooks/new/",
        {"name": "eda", "ide": "jupyterlab", "cpu": "0.5", "memory": "1Gi", "gpu": "0", "start": "1"},
        follow=True,
    )
    assert "no agent is running" in response.content.decode()
    assert Notebook.objects.get(name="eda").status == "stopped"


def test_a_failed_notebook_shows_its_reason_and_log(world, client):
    nb = notebook(
        world.project_a, world.bob, status="failed", reason="exited with code 1: OSError: [Errno 98] in use",
        log_tail="[I ServerApp] starting\nOSError: [Errno 98] in use",
    )  # fmt: skip
    html = logged_in(client, world.alice).get(f"/p/project-a/notebooks/{nb.pk}/").content.decode()

    assert "exited with code 1: OSError: [Errno 98] in use" in html
    assert "[I ServerApp] starting" in html
    assert f'action="/p/project-a/notebooks/{nb.pk}/settings/"' not in html  # only the owner changes settings
    status = logged_in(client, world.bob).get(f"/p/project-a/notebooks/{nb.pk}/status/").content.decode()
    assert status.startswith(f'<div id="notebook-status" data-live="notebook:{nb.pk}"')
    assert "hx-trigger" not in status
    assert f"/p/project-a/notebooks/{nb.pk}/start/" in status


def test_only_the_owner_starts_and_an_admin_stops(world, client):
    heartbeat_agent()
    bobs = notebook(world.project_a, world.bob)

    assert logged_in(client, world.alice).post(f"/p/project-a/notebooks/{bobs.pk}/start/").status_code == 403
    response = logged_in(client, world.bob).post(
        f"/p/project-a/notebooks/{bobs.pk}/start/", {"next": "/p/project-a/notebooks/"}
    )
    assert response["Location"] == "/p/project-a/notebooks/"
    bobs.refresh_from_db()
    assert bobs.status == "starting"
    # A `next` outside the project is not followed.
    response = logged_in(client, world.alice).post(
        f"/p/project-a/notebooks/{bobs.pk}/stop/", {"next": "https://evil.example/"}
    )
    assert response["Location"] == f"/p/project-a/notebooks/{bobs.pk}/"
    bobs.refresh_from_db()
    assert bobs.status == "stopped"


def test_the_owner_changes_settings_with_errors_shown(world, client):
    nb = notebook(world.project_a, world.bob)
    logged_in(client, world.bob)
    url = f"/p/project-a/notebooks/{nb.pk}/settings/"

    bad = client.post(url, {"cpu": "0.5", "memory": "tiny", "gpu": "0", "idle_timeout": "5"})
    assert bad.status_code == 400
    assert "Give a size such as 512Mi" in bad.content.decode()
    assert client.post(url, {"cpu": "2", "memory": "4Gi", "gpu": "0", "idle_timeout": ""}).status_code == 302
    nb.refresh_from_db()
    assert (float(nb.cpu), nb.memory_bytes, nb.idle_timeout) == (2.0, 4 * 2**30, None)
    assert logged_in(client, world.alice).post(url, {"cpu": "1", "memory": "1Gi", "gpu": "0"}).status_code == 403


def test_the_project_settings_page_has_the_notebook_idle_timeout(world, client):
    logged_in(client, world.alice)
    data = {"name": "Project A", "description": "", "runtime": "", "notebook_idle_timeout": "90"}
    assert client.post("/p/project-a/settings/", data).status_code == 302
    world.project_a.refresh_from_db()
    assert world.project_a.notebook_idle_timeout == 90
    bad = client.post("/p/project-a/settings/", {**data, "notebook_idle_timeout": "0"})
    assert bad.status_code == 400


def test_the_list_page_and_api_cost_the_same_queries_for_one_or_many_notebooks(world, client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.conftest import user_client

    logged_in(client, world.bob)
    api = user_client(world.bob)

    def counts() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as page:
            assert client.get("/p/project-a/notebooks/").status_code == 200
        with CaptureQueriesContext(connection) as listed:
            assert api.get("/api/v1/notebooks/").status_code == 200
        return len(page), len(listed)

    notebook(world.project_a, world.alice, name="one")
    few = counts()
    for i in range(5):
        notebook(world.project_a, world.bob if i % 2 else world.alice, name=f"nb-{i}")
    assert counts() == few
