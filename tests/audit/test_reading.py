"""Who reads the audit log: project admins their project's, staff everything; filters and the CSV export."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import reverse

from apps.audit.models import AuditEntry
from apps.projects.models import Role
from tests.conftest import token_client, user_client
from tests.factories import UserFactory, add_member


@pytest.fixture
def entries(world):
    a1 = AuditEntry.objects.create(action="create", actor=world.alice, actor_repr="alice", object_type="jobs.pipeline",
                                   object_repr="pipeline-one", project=world.project_a,
                                   project_repr="project-a")  # fmt: skip
    a2 = AuditEntry.objects.create(action="delete", actor=world.bob, actor_repr="bob", object_type="datasets.dataset",
                                   object_repr="dataset-one", project=world.project_a, project_repr="project-a",
                                   changes={"name": ["a", "b"]})  # fmt: skip
    b1 = AuditEntry.objects.create(action="create", actor=world.charlie, actor_repr="charlie",
                                   object_type="jobs.pipeline", object_repr="their-pipeline",
                                   project=world.project_b)  # fmt: skip
    other = AuditEntry.objects.create(action="login", actor=world.bob, actor_repr="bob", object_type="accounts.user")
    return a1, a2, b1, other


def ids(response) -> set[int]:
    return {row["id"] for row in response.json()["results"]}


def test_project_admins_read_their_projects_entries_only(world, entries):
    a1, a2, b1, _other = entries
    assert ids(user_client(world.alice).get("/api/v1/audit/")) == {a1.pk, a2.pk}
    assert ids(user_client(world.charlie).get("/api/v1/audit/")) == {b1.pk}
    assert user_client(world.charlie).get(f"/api/v1/audit/{a1.pk}/").status_code == 404


@pytest.mark.parametrize("role", [Role.VIEWER, Role.EDITOR])
def test_members_below_admin_read_nothing(world, entries, role):
    user = UserFactory(username="someone")
    add_member(world.project_a, user, role)
    assert ids(user_client(user).get("/api/v1/audit/")) == set()
    client_url = reverse("audit:project-log", kwargs={"project": "project-a"})
    from django.test import Client

    client = Client()
    client.force_login(user)
    assert client.get(client_url).status_code == 403


def test_staff_read_everything_and_a_project_token_narrows_it(world, entries):
    world.charlie.is_staff = True
    world.charlie.save()
    assert ids(user_client(world.charlie).get("/api/v1/audit/")) == {e.pk for e in entries}
    limited = token_client(world.charlie, project=world.project_b, scope="read")
    assert ids(limited.get("/api/v1/audit/")) == {entries[2].pk}


def test_the_api_filters(world, entries):
    a1, a2, _b1, _other = entries
    client = user_client(world.alice)
    assert ids(client.get("/api/v1/audit/", {"actor": "bob"})) == {a2.pk}
    assert ids(client.get("/api/v1/audit/", {"action": "create"})) == {a1.pk}
    assert ids(client.get("/api/v1/audit/", {"object_type": "datasets.dataset"})) == {a2.pk}
    today = a1.created_at.date().isoformat()
    assert ids(client.get("/api/v1/audit/", {"since": today, "until": today})) == {a1.pk, a2.pk}
    assert ids(client.get("/api/v1/audit/", {"since": "2999-01-01"})) == set()
    assert client.get("/api/v1/audit/", {"since": "not a date"}).status_code == 400


def test_the_project_page_lists_and_filters(world, entries, client):
    client.force_login(world.alice)
    url = reverse("audit:project-log", kwargs={"project": "project-a"})
    html = client.get(url).content.decode()
    assert "pipeline-one" in html
    assert "dataset-one" in html
    assert "their-pipeline" not in html
    html = client.get(url, {"actor": "bob"}).content.decode()
    assert "dataset-one" in html
    assert "pipeline-one" not in html
    members = reverse("projects:members", kwargs={"project": "project-a"})  # a page of the Settings group
    assert f'href="{url}"' in client.get(members).content.decode()
    client.force_login(world.bob)  # an editor: no tab
    assert f'href="{url}"' not in client.get(members).content.decode()


def test_outsiders_get_404_and_only_staff_read_the_global_page(world, entries, client):
    client.force_login(world.charlie)
    assert client.get(reverse("audit:project-log", kwargs={"project": "project-a"})).status_code == 404
    assert client.get(reverse("audit:project-log-csv", kwargs={"project": "project-a"})).status_code == 404
    refused = client.get(reverse("audit:log"))  # not a redirect to the admin's login, a dead end for members
    assert refused.status_code == 403
    assert "Each project&#x27;s log is on its Audit log tab" in refused.content.decode()
    assert client.get(reverse("audit:log-csv")).status_code == 403
    client.logout()
    assert client.get(reverse("audit:log"))["Location"].startswith(reverse("accounts:login"))
    client.force_login(world.charlie)
    world.charlie.is_staff = True
    world.charlie.save()
    html = client.get(reverse("audit:log")).content.decode()
    assert "their-pipeline" in html
    assert "pipeline-one" in html


def test_the_page_shows_changes_as_a_diff_of_json_and_iso_times(world, entries, client):
    AuditEntry.objects.create(
        action="update", actor=world.alice, actor_repr="alice", object_type="jobs.pipeline", object_repr="pipeline-one",
        project=world.project_a, project_repr="project-a",
        changes={"spec": [{"nodes": [], "priority": 0}, {"nodes": [], "priority": 5}], "paused": [False, True]},
    )  # fmt: skip
    client.force_login(world.alice)

    html = client.get(reverse("audit:project-log", kwargs={"project": "project-a"})).content.decode()

    spec = html.split('data-field="spec"', 1)[1].split("</div>", 1)[0]
    assert '<del class="text-danger-emphasis text-break">{&quot;nodes&quot;: [], &quot;priority&quot;: 0}</del>' in spec
    assert "&quot;priority&quot;: 5}</ins>" in spec
    assert "False" not in html.split('data-field="paused"', 1)[1].split("</div>", 1)[0]  # JSON, not a Python repr
    assert re.search(r'<time datetime="[^"]+">\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}</time>', html)


def test_the_csv_export_streams_the_filtered_rows(world, entries, client):
    client.force_login(world.alice)
    response = client.get(reverse("audit:project-log-csv", kwargs={"project": "project-a"}), {"action": "delete"})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["actor_repr"], r["action"], r["object_repr"]) for r in rows] == [("bob", "delete", "dataset-one")]
    assert rows[0]["changes"] == '{"name": ["a", "b"]}'
