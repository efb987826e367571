"""The local server's provisioning: account and token made once, stored encrypted; which server the portal uses."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.labeling import server
from apps.labeling.client import LabelStudioUnavailable
from apps.labeling.models import LabelStudioServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def local(settings, tmp_path):
    settings.LABELING = "on"
    settings.LABEL_STUDIO_URL = ""
    settings.LABEL_STUDIO_PORT = 18199
    settings.LABEL_STUDIO_DATA_DIR = tmp_path / "ls"
    return settings


def test_first_use_makes_an_admin_and_token_stored_encrypted(local):
    spec = server.local_server()
    row = LabelStudioServer.objects.get()
    assert (row.url, row.email) == ("http://127.0.0.1:18199", server.ADMIN_EMAIL)
    assert len(spec.token) == 40
    assert spec.token == row.token
    assert spec.password == row.password
    with connection.cursor() as cursor:
        cursor.execute("SELECT token, password FROM labeling_labelstudioserver")
        raw_token, raw_password = cursor.fetchone()
    assert spec.token not in raw_token
    assert spec.password not in raw_password
    assert server.local_server().token == spec.token  # made once, the same on every start


def test_the_token_travels_in_the_environment_not_on_the_command_line(local):
    spec = server.local_server()
    assert spec.token not in " ".join(spec.command())
    assert spec.password not in " ".join(spec.command())
    env = spec.environment({"DATABASE_URL": "postgres://portal", "DJANGO_SETTINGS_MODULE": "portal.settings"})
    assert env["LABEL_STUDIO_USER_TOKEN"] == spec.token
    assert "DATABASE_URL" not in env
    assert "DJANGO_SETTINGS_MODULE" not in env
    assert env["SSRF_PROTECTION_ENABLED"] == env["ML_BLOCK_LOCAL_IP"] == "false"
    assert spec.command()[1] == "start"
    assert "127.0.0.1" in spec.command()


def test_until_provisioned_the_portal_says_it_is_starting(local):
    server.local_server()
    with pytest.raises(LabelStudioUnavailable, match="starting"):
        server.connect()
    server.mark_provisioned({"label-studio-os-package": {"version": "1.23.2"}})
    with server.connect() as client:
        assert client.url == "http://127.0.0.1:18199"
    assert LabelStudioServer.objects.get().version == "1.23.2"
    state = server.state()
    assert state["ok"] is False
    assert "down or starting" in state["detail"]


def test_labeling_off(settings):
    settings.LABELING = "off"
    with pytest.raises(LabelStudioUnavailable, match="off"):
        server.connect()
    with pytest.raises(CommandError, match="off"):
        call_command("runlabelstudio")


def test_an_external_server_is_not_started_here(settings):
    settings.LABELING, settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "on", "http://ls.example:8080", ""
    with pytest.raises(CommandError, match="LABEL_STUDIO_URL"):
        call_command("runlabelstudio")
    with pytest.raises(LabelStudioUnavailable, match="no token"):
        server.connect()


def test_the_session_server_accepts_the_token_it_was_started_with(ls):
    with server.connect() as client:
        assert client.whoami()["email"] == ls.email
        assert client.version()["release"].startswith("1.23.")
