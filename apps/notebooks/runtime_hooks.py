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
from apps.runtime import hooks
from apps.runtime.secretenv import Secrets
from apps.runtime.tail import TailSink
from apps.runtime.usage import NOTEBOOK, Holder, label_ids
from apps.runtime.workload import Phase, Status, Workload
from portal.lib.resources import Resources

logger = logging.getLogger(__name__)


class NotebookSink(TailSink):
    """The server's last lines, in `Notebook.log_tail` (apps/runtime/tail.py)."""

    model = Notebook


class NotebookListener(hooks.Listener):
    def sink(self, workload: Workload, secrets: Secrets) -> NotebookSink:
        return NotebookSink(int(workload.labels["notebook"]), workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        pk = int(workload.labels["notebook"])
        if phase == Phase.RUNNING:
            services.server_started(pk, workload.uid)
        elif phase.finished:
            services.record_end(pk, workload.uid, phase, status)


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


def quota_held(project_ids: set[int], except_pk: int | None) -> Iterator[tuple[int, Resources]]:
    """What running notebooks hold of their projects' quotas (apps/projects/usage.py)."""
    notebooks = Notebook.objects.filter(project_id__in=project_ids, status__in=Notebook.ACTIVE)
    if except_pk is not None:
        notebooks = notebooks.exclude(pk=except_pk)
    for project_id, cpu, memory, gpu in notebooks.values_list("project_id", "cpu", "memory_bytes", "gpu"):
        yield project_id, Resources.of(cpu, memory, gpu)
