"""What the runtime calls back for notebook servers (label `notebook`): their log tail and state changes.

Runs in the agent's (or the Kubernetes controller's) process, on its threads: it only records and hands the slow
part (waiting for the server to answer) to a Celery task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.urls import reverse

from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.runtime.tail import TailSink
from apps.runtime.usage import NOTEBOOK, Holder, label_ids
from apps.runtime.workload import Phase, Status, Workload
from portal.lib import sealed

logger = logging.getLogger(__name__)


class NotebookSink(TailSink):
    """The server's last lines, in `Notebook.log_tail` (apps/runtime/tail.py)."""

    model = Notebook


class NotebookListener:
    def sink(self, workload: Workload) -> NotebookSink:
        # Before the agent plans the server's process: its tokens are sealed references in the stored spec, and
        # become values here, in memory (portal/lib/sealed.py).
        sealed.complete_env(workload.env)
        return NotebookSink(int(workload.labels["notebook"]), workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        pk = int(workload.labels["notebook"])
        if phase == Phase.RUNNING:
            services.server_started(pk, workload.uid)
        elif phase.finished:
            services.record_end(pk, workload.uid, phase, status)

    def logs(self, workload_uid: str, since: int) -> Iterator[tuple[str, int, str, str, str]]:
        """The kept tail, numbered from 1 (older lines are not kept)."""
        tail = Notebook.objects.filter(handle=workload_uid).values_list("log_tail", flat=True).first() or ""
        for seq, text in enumerate(tail.splitlines(), start=1):
            if seq > since:
                yield "0", seq, "", "stdout", text


def describe_holders(holders: list[Holder]) -> None:
    """The capacity page's words for a notebook's workload: its name, its owner, its page."""
    rows = Notebook.objects.filter(pk__in=label_ids(holders, "notebook")).select_related("project", "owner")
    notebooks = {nb.pk: nb for nb in rows}
    for holder in holders:
        if (nb := notebooks.get(int(holder.labels.get("notebook") or 0))) is None:
            continue
        holder.kind = NOTEBOOK
        holder.what = nb.name
        holder.user = nb.owner.username
        holder.url = reverse("notebooks:notebook-detail", kwargs={"project": nb.project.slug, "pk": nb.pk})
        holder.project_name = nb.project.name
