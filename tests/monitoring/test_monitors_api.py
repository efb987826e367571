"""/api/v1/drift-monitors/ and /api/v1/drift-reports/: editors create, change, run and delete monitors; members read;
bad input is a 400 naming each field; another tenant gets 404; writes are audited."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditEntry
from apps.monitoring.models import DriftMonitor, DriftReport
from tests import factories
from tests.conftest import user_client
from tests.serving.replicas import make_service

pytestmark = pytest.mark.django_db

LIST = "/api/v1/drift-monitors/"


def test_an_editor_creates_and_changes_a_monitor(world):
    make_service(world.project_a)
    version = factories.dataset_version(factories.dataset(world.project_a, world.alice, name="iris"))
    client = user_client(world.bob)

    created = client.post(
        LIST,
        {"project": "project-a", "service": "iris", "reference_version": "iris@1", "threshold": 0.25},
        format="json",
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["service"] == "iris"
    assert body["reference_version"] == "iris@1"
    assert body["threshold"] == 0.25
    assert body["latest_report"] is None
    monitor = DriftMonitor.objects.get(pk=body["id"])
    assert monitor.reference_version == version
    changed = client.patch(f"{LIST}{monitor.pk}/", {"interval_minutes": 5, "reference_version": None}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["interval_minutes"] == 5
    assert changed.json()["reference_version"] is None
    assert AuditEntry.objects.filter(project=world.project_a).exists()


def test_running_a_monitor_answers_its_report(world):
    service = make_service(world.project_a)
    monitor = DriftMonitor.objects.create(project=world.project_a, service=service)
    client = user_client(world.bob)

    ran = client.post(f"{LIST}{monitor.pk}/run/")

    assert ran.status_code == 201
    assert ran.json()["status"] == "failed"
    listed = client.get("/api/v1/drift-reports/", {"monitor": monitor.pk}).json()["results"]
    assert [r["id"] for r in listed] == [ran.json()["id"]]
    assert client.get(f"{LIST}{monitor.pk}/series/").json()["t"] == []


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"service": "nope"}, "service", "No such service in this project."),
        ({"service": "iris", "threshold": 0}, "threshold", "Ensure this value is greater than or equal to 0.001."),
        ({"service": "iris", "threshold": "x"}, "threshold", "A valid number is required."),
        ({"service": "iris", "window_hours": 0}, "window_hours", "Ensure this value is greater than or equal to 1."),
        ({"service": "iris", "interval_minutes": 1.5}, "interval_minutes", "A valid integer is required."),
        (
            {"service": "iris", "reference_version": "iris@9"},
            "reference_version",
            "No such dataset version in this project (give its id or name@number).",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(world, body, field, message):
    make_service(world.project_a)

    response = user_client(world.bob).post(LIST, {"project": "project-a", **body}, format="json")

    assert response.status_code == 400
    assert message in response.json()[field]


def test_one_monitor_per_service(world):
    service = make_service(world.project_a)
    DriftMonitor.objects.create(project=world.project_a, service=service)

    response = user_client(world.bob).post(LIST, {"project": "project-a", "service": "iris"}, format="json")

    assert response.status_code == 400
    assert response.json()["service"] == ["This service already has a drift monitor."]


def test_another_tenant_gets_404(world):
    service = make_service(world.project_a)
    monitor = DriftMonitor.objects.create(project=world.project_a, service=service)
    report = DriftReport.objects.create(monitor=monitor, status=DriftReport.Status.SKIPPED)
    charlie = user_client(world.charlie)

    assert charlie.get(f"{LIST}{monitor.pk}/").status_code == 404
    assert charlie.post(f"{LIST}{monitor.pk}/run/").status_code == 404
    assert charlie.patch(f"{LIST}{monitor.pk}/", {"threshold": 1}, format="json").status_code == 404
    assert charlie.delete(f"{LIST}{monitor.pk}/").status_code == 404
    assert charlie.get(f"/api/v1/drift-reports/{report.pk}/").status_code == 404
    assert charlie.get(LIST).json()["results"] == []
    # nor can a monitor be made in B of A's service
    response = charlie.post(LIST, {"project": "project-b", "service": str(service.pk)}, format="json")
    assert response.status_code == 400
    assert response.json()["service"] == ["No such service in this project."]


def test_a_viewer_reads_but_does_not_run(world):
    from apps.projects.models import Role

    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    monitor = DriftMonitor.objects.create(project=world.project_a, service=make_service(world.project_a))
    client = user_client(viewer)

    assert client.get(f"{LIST}{monitor.pk}/").status_code == 200
    assert client.post(f"{LIST}{monitor.pk}/run/").status_code == 403
    assert client.delete(f"{LIST}{monitor.pk}/").status_code == 403
