from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import authenticate as django_authenticate
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import RequestFactory

from apps.accounts.models import Notification
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
