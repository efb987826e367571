"""The base of the runtimes that keep their workloads as rows (`local`: LocalWorkload, `kubernetes`: KubeWorkload).

Submit writes a row in the submitter's transaction (idempotent on the uid), a long-lived process of the portal
(the local agent, the Kubernetes controller) claims it and makes it real, and poll and cancel only read and mark
the row: the process records every change there, and a woken process acts on a cancel. What differs is where a
row goes (`submit_many`), what its status holds (`status_of`), which rows a cancel can end at once
(`cancel_unstarted`), how the processes are woken (`wake`) and when the runtime takes work (`ready`).
"""

from __future__ import annotations

from abc import abstractmethod

from django.db import transaction
from django.db.models import QuerySet

from apps.runtime.base import Runtime
from apps.runtime.models import WorkloadRow
from apps.runtime.workload import Phase, Status, Workload

ACTIVE = [WorkloadRow.State.PENDING, WorkloadRow.State.RUNNING]
NO_RECORD = "the runtime has no record of this workload"


class RowRuntime(Runtime):
    model: type[WorkloadRow]

    def submit(self, workload: Workload) -> str:
        return self.submit_many([workload])[0]

    def poll(self, handle: str) -> Status:
        return self.poll_many([handle])[handle]

    def poll_many(self, handles: list[str]) -> dict[str, Status]:
        """One query for all: a handle without a row is LOST (the runtime cannot have run it)."""
        rows = {row.uid: row for row in self.rows_to_poll(handles)}
        return {
            handle: self.status_of(rows[handle]) if handle in rows else Status(Phase.LOST, reason=NO_RECORD)
            for handle in handles
        }

    def rows_to_poll(self, handles: list[str]) -> QuerySet:
        """The rows of `handles`, without their spec (a status never needs it)."""
        return self.model.objects.defer("spec").filter(uid__in=handles)

    @abstractmethod
    def status_of(self, row: WorkloadRow) -> Status:
        """What `poll` answers for a row."""

    def cancel(self, handle: str) -> None:
        """A row no process has taken up is cancelled at once; otherwise its process is asked to stop it (and
        records the cancellation), woken after the caller's commit."""
        if self.cancel_unstarted(handle):
            return
        if self.model.objects.filter(uid=handle, state__in=ACTIVE).update(cancel_requested=True):
            self.stop_started(handle)
        transaction.on_commit(self.wake)

    def stop_started(self, handle: str) -> None:
        """What else stopping a started workload takes, in the caller's transaction (nothing: its process acts on
        the mark once woken)."""

    @abstractmethod
    def cancel_unstarted(self, handle: str) -> bool:
        """Cancel the workload at once when nothing of it was started yet; whether it was."""

    @abstractmethod
    def wake(self) -> None:
        """Nudge the processes that realise the rows (best effort: they also look for work every second)."""
