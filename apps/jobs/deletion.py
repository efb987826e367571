"""Deleting runs: a finished run's rows and work folder, and a deleted project's running work."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.jobs.models import TASK_ACTIVE, PipelineRun, TaskRun
from apps.projects.models import Project
from apps.runtime.base import get_runtime


def run_folder(run: PipelineRun) -> Path:
    """Where a run's task attempts write (the parent of `dispatcher.output_dir`'s folders)."""
    return Path(settings.PORTAL_WORK_DIR) / run.project.slug / f"run-{run.number}"


def delete_run(run: PipelineRun) -> None:
    """Forget a finished run (its tasks, logs and samples) and, once that commits, its work folder."""
    if not run.is_finished:
        raise ValidationError({"status": [_("Cancel the run before deleting it.")]})
    folder = run_folder(run)
    with transaction.atomic():
        PipelineRun.objects.filter(pk=run.pk).delete()
        # Later runs may still read attempts of this one (re-runs and cache hits reuse an output folder in place):
        # those stay; the rest of the folder goes.
        kept = set(
            TaskRun.objects.filter(run__project_id=run.project_id, output_dir__startswith=f"{folder}/").values_list(
                "output_dir", flat=True
            )
        )
        transaction.on_commit(lambda: remove_folder(folder, {Path(p) for p in kept}))


def stop_project_runs(project: Project) -> None:
    """A project is being deleted (inside its transaction): every running or queued task attempt is cancelled in
    the runtime (a row the agent or controller acts on once this commits); the run rows go with the project, and
    their work folders once that commits."""
    active = TaskRun.objects.filter(run__project=project, status__in=TASK_ACTIVE).exclude(handle="")
    for task in active.only("id", "runtime", "handle"):
        get_runtime(task.runtime).cancel(task.handle)
    folders = [run_folder(run) for run in PipelineRun.objects.filter(project=project).select_related("project")]
    parent = Path(settings.PORTAL_WORK_DIR) / project.slug

    def remove() -> None:
        for folder in folders:
            remove_folder(folder, set())
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty: never more than the runs' own folders

    transaction.on_commit(remove)


def remove_folder(folder: Path, keep: set[Path]) -> None:
    """Remove `folder` except the paths in `keep` (and what leads to them)."""
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
        return
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        if child in keep:
            continue
        if any(child in path.parents for path in keep):
            remove_folder(child, keep)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
