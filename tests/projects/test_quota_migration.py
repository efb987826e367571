"""projects.0005: `concurrent_runs` was enforced on tasks before it meant runs, so a limit an operator set keeps
holding on tasks too (never loosened silently by the upgrade)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.projects.models import Quota


@pytest.mark.django_db(transaction=True)  # SQLite rebuilds the table outside a transaction
def test_a_concurrent_runs_limit_set_before_also_limits_tasks_after_the_upgrade(world):
    Quota.objects.filter(project=world.project_a).update(concurrent_runs=3)
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()  # every app: going back unapplies what depends on it
    try:
        executor.migrate([("projects", "0004_project_notebook_idle_timeout")])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)

    quotas = dict(Quota.objects.values_list("project__slug", "concurrent_tasks"))
    assert quotas == {"project-a": 3, "project-b": None}
    assert Quota.objects.get(project=world.project_a).concurrent_runs == 3
