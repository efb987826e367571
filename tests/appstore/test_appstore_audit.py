"""Installing and uninstalling are recorded in the audit log, in the project they changed."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditEntry
from tests.appstore.factories import builtin_version
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


def test_install_and_uninstall_are_audited(world):
    builtin_version()
    client = user_client(world.bob)
    created = client.post("/api/v1/installations/", {"project": "project-a", "app": "tabular-classification"},
                          format="json").json()  # fmt: skip
    client.delete(f"/api/v1/installations/{created['id']}/")

    entries = list(AuditEntry.objects.filter(path__startswith="/api/v1/installations/").order_by("pk"))
    assert [(e.action, e.method, e.actor, e.project) for e in entries] == [
        ("create", "POST", world.bob, world.project_a), ("delete", "DELETE", world.bob, world.project_a),
    ]  # fmt: skip
    assert [(e.object_type, e.object_id) for e in entries] == [("appstore.installation", str(created["id"]))] * 2
