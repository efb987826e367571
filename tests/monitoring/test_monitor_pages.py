"""The drift monitor pages: list, create (form errors at 400), detail with the latest features and the chart's data,
run now, edit, delete; another tenant gets 404."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.monitoring.models import DriftMonitor, DriftReport
from tests.serving.replicas import make_service

pytestmark = pytest.mark.django_db


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(name: str, **kwargs) -> str:
    return reverse(f"monitoring:{name}", kwargs={"project": "project-a", **kwargs})


def test_an_editor_creates_a_monitor_from_the_form(world):
    service = make_service(world.project_a)
    client = browser(world.bob)

    fields = {"service": str(service.pk), "window_hours": "24", "min_rows": "30", "interval_minutes": "60"}
    bad = client.post(url("monitor-create"), {**fields, "threshold": "-1"})
    assert bad.status_code == 400
    assert "Between 0.001 and 100.0." in bad.content.decode()

    made = client.post(url("monitor-create"), {**fields, "threshold": "0.3", "enabled": "on"})
    monitor = DriftMonitor.objects.get(service=service)
    assert made.status_code == 302
    assert made.url == url("monitor-detail", pk=monitor.pk)
    assert monitor.threshold == 0.3
    assert monitor.enabled


def test_the_detail_page_shows_the_latest_features_and_the_chart(world):
    monitor = DriftMonitor.objects.create(project=world.project_a, service=make_service(world.project_a))
    features = {
        "petal_length": {"kind": "numeric", "score": 1.7, "psi": 1.7, "ks": 0.8, "ks_p": 1e-9},
        "colour": {"kind": "categorical", "score": 0.01, "psi": 0.01, "chi2": 0.5, "chi2_p": 0.7},
    }
    DriftReport.objects.create(monitor=monitor, status="drifted", score=1.7, features=features, current_rows=40)

    page = browser(world.bob).get(url("monitor-detail", pk=monitor.pk)).content.decode()

    assert "Drift of iris" in page
    assert 'data-report-status="drifted"' in page
    assert "petal_length" in page
    assert "1.700" in page
    assert 'id="drift-chart-data"' in page
    assert "js/drift.js" in page
    listing = browser(world.bob).get(url("monitor-list")).content.decode()
    assert url("monitor-detail", pk=monitor.pk) in listing


def test_run_now_edit_and_delete(world):
    monitor = DriftMonitor.objects.create(project=world.project_a, service=make_service(world.project_a))
    client = browser(world.bob)

    assert client.post(url("monitor-run", pk=monitor.pk)).status_code == 302
    assert monitor.reports.get().status == DriftReport.Status.FAILED
    edited = client.post(url("monitor-edit", pk=monitor.pk), {"threshold": "0.5", "window_hours": "12",
                                                               "min_rows": "5", "interval_minutes": "15"})  # fmt: skip
    assert edited.status_code == 302
    monitor.refresh_from_db()
    assert (monitor.threshold, monitor.window_hours, monitor.enabled) == (0.5, 12, False)
    assert client.post(url("monitor-delete", pk=monitor.pk)).status_code == 302
    assert not DriftMonitor.objects.filter(pk=monitor.pk).exists()


def test_another_tenant_gets_404(world):
    monitor = DriftMonitor.objects.create(project=world.project_a, service=make_service(world.project_a))
    client = browser(world.charlie)

    assert client.get(url("monitor-list")).status_code == 404
    assert client.get(url("monitor-detail", pk=monitor.pk)).status_code == 404
    assert client.post(url("monitor-run", pk=monitor.pk)).status_code == 404
    other = reverse("monitoring:monitor-detail", kwargs={"project": "project-b", "pk": monitor.pk})
    assert client.get(other).status_code == 404
