"""The transactional tests' faster end (tests/dbreset.py) leaves what Django's flush leaves."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from apps.appstore.models import AppVersion
from apps.jobs.models import JobTemplate
from tests import dbreset
from tests.factories import ProjectFactory, UserFactory

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the snapshot is kept on PostgreSQL only")


def contents() -> dict[str, object]:
    """Every table's row count, and the built-in rows by what they are (their ids differ after each flush)."""
    with connection.cursor() as cursor:
        counts = {}
        for table in dbreset._tables("default"):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return {
        "counts": counts,
        "permissions": sorted(Permission.objects.values_list("content_type__app_label", "codename", "name")),
        "content types": sorted(ContentType.objects.values_list("app_label", "model")),
        "templates": sorted(JobTemplate.objects.values_list("slug", "version", "project", "name", "command")),
        "app versions": sorted(AppVersion.objects.values_list("app__name", "app__builtin", "version", "digest")),
    }


def spoil() -> None:
    """What a test may do to the database: add rows, change and delete built-in ones."""
    ProjectFactory(owner=UserFactory(username="alice"))
    JobTemplate.objects.filter(project__isnull=True).update(name="changed")
    Permission.objects.filter(codename__startswith="view_").delete()
    AppVersion.objects.order_by("pk").first().delete()


def test_restoring_the_snapshot_leaves_what_a_flush_leaves(transactional_db):
    snapshot = dbreset._snapshots.get("default") or dbreset.capture("default")
    spoil()
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)  # Django's way, post_migrate included
    flushed = contents()
    assert flushed["templates"]
    assert flushed["app versions"]
    assert flushed["permissions"]
    spoil()
    dbreset.restore("default", snapshot)
    assert contents() == flushed
    # The content type cache holds no rows of before the restore.
    cached = ContentType.objects.get_for_model(JobTemplate)
    assert cached == ContentType.objects.get(app_label="jobs", model="jobtemplate")
