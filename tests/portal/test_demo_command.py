from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate as django_authenticate
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import RequestFactory

from apps.accounts.models import Notification
from apps.outbox.models import PendingTask
from apps.projects import services
from apps.projects.models import Membership, Project, Role

pytestmark = [pytest.mark.smoke, pytest.mark.django_db]


def authenticate(username: str, password: str):
    """As the login form does: the lockout backend (django-axes) wants the request."""
    return django_authenticate(RequestFactory().post("/accounts/login/"), username=username, password=password)


def run_demo(monkeypatch, password: str | None = None) -> str:
    if password is None:
        monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("DEMO_PASSWORD", password)
    out = StringIO()
    call_command("demo", stdout=out)
    return out.getvalue()


def test_demo_creates_a_user_who_can_log_in_with_the_printed_password(monkeypatch):
    output = run_demo(monkeypatch)
    password = output.split("demo / ")[1].split()[0]
    assert authenticate(username="demo", password=password) is not None
    assert "shown once" in output


def test_demo_project_has_every_role_a_quota_and_a_notification(monkeypatch):
    run_demo(monkeypatch)
    project = Project.objects.get(slug="demo")
    roles = dict(Membership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {"demo": Role.OWNER, "ada": Role.EDITOR, "grace": Role.VIEWER}
    assert project.quota.concurrent_runs == 4
    assert Notification.objects.filter(user__username="demo").exists()
    demo = get_user_model().objects.get(username="demo")
    assert demo.has_perm("projects.delete_project", project)
    # The digits labeling project's portal part; the rest is queued until Label Studio is up (tests/labeling/
    # test_demo_labeling.py runs that task against a real Label Studio).
    assert project.datasets.get(name="digits").versions.get().files.count() == 48
    assert project.inference_services.filter(name="digits", registered_model__name="digits-classifier").exists()
    (queued,) = PendingTask.objects.filter(name="apps.labeling.tasks.complete_demo")
    assert queued.args[:2] == [project.pk, demo.pk]


def test_demo_is_idempotent_and_keeps_the_password(monkeypatch):
    first = run_demo(monkeypatch)
    password = first.split("demo / ")[1].split()[0]
    second = run_demo(monkeypatch)
    assert "demo / " not in second
    assert Project.objects.filter(slug="demo").count() == 1
    assert Membership.objects.filter(project__slug="demo").count() == 3
    assert authenticate(username="demo", password=password) is not None


def test_demo_password_comes_from_the_environment(monkeypatch):
    run_demo(monkeypatch)
    run_demo(monkeypatch, password="a-long-demo-password")
    assert authenticate(username="demo", password="a-long-demo-password") is not None


def test_demo_repairs_its_project_when_the_demo_user_no_longer_manages_it(monkeypatch):
    """Issue 17.22–23: `make run` refused to start once the demo user had lost the management of its project (the
    demo re-added its example members through the demo user's own permission check: PermissionDenied)."""
    run_demo(monkeypatch)
    project = Project.objects.get(slug="demo")
    demo = get_user_model().objects.get(username="demo")
    ada = get_user_model().objects.get(username="ada")
    # Ada is made the owner and the demo user a viewer; Grace has left.
    services.change_role(Membership.objects.get(project=project, user=ada), demo, Role.OWNER)
    services.change_role(Membership.objects.get(project=project, user=demo), ada, Role.VIEWER)
    services.leave_project(project, get_user_model().objects.get(username="grace"))
    assert not demo.has_perm("projects.manage_members", project)

    output = run_demo(monkeypatch)

    assert "Demo ready" in output
    roles = dict(Membership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {"demo": Role.OWNER, "ada": Role.OWNER, "grace": Role.VIEWER}
    demo = get_user_model().objects.get(username="demo")  # a fresh object: no cached permissions
    assert demo.has_perm("projects.manage_members", project)
    assert demo.has_perm("projects.delete_project", project)


def test_demo_makes_its_project_where_users_may_not_create_projects(monkeypatch, settings):
    """The system makes the demo project: PORTAL_ALLOW_PROJECT_CREATION=false limits users, not the demo. (With
    LABELING=off too: the demo then leaves its digits labeling project out.)"""
    settings.PORTAL_ALLOW_PROJECT_CREATION = False
    settings.LABELING = "off"
    output = run_demo(monkeypatch)
    project = Project.objects.get(slug="demo")
    assert Membership.objects.get(project=project, user__username="demo").role == Role.OWNER
    assert "Labeling is off" in output
    assert not project.datasets.filter(name="digits").exists()
    assert not PendingTask.objects.filter(name="apps.labeling.tasks.complete_demo").exists()


def test_an_example_that_cannot_be_made_is_a_warning_and_the_rest_is_made(monkeypatch, settings, tmp_path, caplog):
    """A demo problem never blocks the portal: here the dataset storage is unusable (a file where its folder
    should be), so the iris dataset and the pipeline that reads it cannot be made; the rest is."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    settings.STORAGES = {
        **settings.STORAGES,
        "datasets": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": blocked}},
    }
    caplog.set_level("WARNING", logger="apps.projects.management.commands.demo")

    output = run_demo(monkeypatch)

    assert "Demo ready" in output
    project = Project.objects.get(slug="demo")
    assert Membership.objects.filter(project=project).count() == 3
    assert not project.datasets.exists()  # the failed example left nothing half-made
    assert project.experiments.filter(name="iris-models").exists()  # the tracking example is independent
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "iris dataset" in warned
    assert "iris pipeline" in warned
