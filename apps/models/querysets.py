"""Querysets of the tracking models: tenant filtering (`for_user`, `in_project`) plus lifecycle helpers."""

from __future__ import annotations

from apps.projects.querysets import TenantQuerySet

ACTIVE = "active"
DELETED = "deleted"


class LifecycleQuerySet(TenantQuerySet):
    """Experiments and runs: MLflow's view types (ACTIVE_ONLY, DELETED_ONLY, ALL) on `lifecycle_stage`."""

    def view_type(self, view_type: str | int | None) -> LifecycleQuerySet:
        value = str(view_type or "ACTIVE_ONLY").upper()
        if value in ("1", "ACTIVE_ONLY"):
            return self.filter(lifecycle_stage=ACTIVE)
        if value in ("2", "DELETED_ONLY"):
            return self.filter(lifecycle_stage=DELETED)
        return self

    def active(self) -> LifecycleQuerySet:
        return self.filter(lifecycle_stage=ACTIVE)
