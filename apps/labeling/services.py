"""Labeling workflows: a labeling project made from a dataset version, its tasks imported into Label Studio.

Errors: `ValidationError` keyed by field (forms show them, the API answers 400); `LabelStudioUnavailable` when
the server cannot be reached (pages and API say so, 503) — raised before anything is written.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import posixpath
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils.translation import gettext as _

from apps.datasets import blobs
from apps.datasets.models import DatasetVersion, VersionFile
from apps.labeling import configs, server, sync
from apps.labeling.client import LabelStudio, LabelStudioError, error_messages
from apps.labeling.media import media_url
from apps.labeling.models import LabelingProject, LabelingTask
from apps.projects.models import Project

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
TEXT_EXTENSIONS = {".txt", ".csv", ".jsonl"}
MAX_TEXT_FILE = 64 * 2**20  # bytes of one text/CSV/JSONL file read into tasks
MAX_TASKS = 100_000


def validate_label_config(client: LabelStudio, label_config: str) -> None:
    """Label Studio's own check of the XML (SDK: projects.validate_label_config): refused → ValidationError."""
    if not label_config.strip():
        raise ValidationError({"label_config": [_("Write a label configuration.")]})
    try:
        client.validate_label_config(label_config)
    except LabelStudioError as exc:
        if exc.status != 400:
            raise
        raise ValidationError({"label_config": error_messages(exc.detail)}) from exc


def label_config_for(kind: str, labels: list[str], label_config: str) -> tuple[list[str], str]:
    if kind not in LabelingProject.Kind.values:
        raise ValidationError({"kind": [_("Choose one of the kinds offered.")]})
    if kind == LabelingProject.Kind.XML:
        return [], label_config
    cleaned = configs.clean_labels(labels)
    return cleaned, configs.build(kind, cleaned)


def task_sources(version: DatasetVersion, kind: str, key: str, text_column: str) -> list[tuple[str, int | None, Any]]:
    """(path, row, inline value) of every task the version gives: one per image, or one per line/row of text."""
    files = list(version.files.order_by("path"))
    image_like = kind in configs.IMAGE_KINDS or (kind == LabelingProject.Kind.XML and key == "image")
    sources: list[tuple[str, int | None, Any]] = []
    if image_like:
        sources = [(f.path, None, None) for f in files if posixpath.splitext(f.path)[1].lower() in IMAGE_EXTENSIONS]
        if not sources:
            raise ValidationError(
                {"dataset_version": [_("This version holds no images (PNG, JPEG, GIF, BMP, WebP, TIFF).")]}
            )
        return sources
    for entry in files:
        extension = posixpath.splitext(entry.path)[1].lower()
        if extension not in TEXT_EXTENSIONS:
            continue
        if entry.size > MAX_TEXT_FILE:
            raise ValidationError(
                {"dataset_version": [_("%(path)s is too large to label line by line.") % {"path": entry.path}]}
            )
        sources.extend((entry.path, row, text) for row, text in _text_rows(entry, extension, text_column))
        if len(sources) > MAX_TASKS:
            raise ValidationError({"dataset_version": [_("More than %(n)d tasks.") % {"n": MAX_TASKS}]})
    if not sources:
        raise ValidationError(
            {"dataset_version": [_("This version holds no text to label (.txt lines, or a column of .csv/.jsonl).")]}
        )
    return sources


def _text_rows(entry: VersionFile, extension: str, column: str) -> Iterator[tuple[int, str]]:
    raw = b"".join(blobs.open_chunks(entry.blob_id)).decode("utf-8", "replace")
    if extension == ".txt":
        for number, line in enumerate(raw.splitlines()):
            if line.strip():
                yield number, line
        return
    if not column:
        raise ValidationError(
            {"text_column": [_("Name the column that holds the text of %(path)s.") % {"path": entry.path}]}
        )
    if extension == ".csv":
        reader = csv.DictReader(io.StringIO(raw))
        if column not in (reader.fieldnames or []):
            raise ValidationError(
                {"text_column": [_("%(path)s has no column %(column)s.") % {"path": entry.path, "column": column}]}
            )
        for number, record in enumerate(reader):
            if (record.get(column) or "").strip():
                yield number, record[column]
        return
    for number, line in enumerate(raw.splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValidationError(
                {"dataset_version": [_("%(path)s line %(n)d is not JSON.") % {"path": entry.path, "n": number + 1}]}
            ) from exc
        value = record.get(column) if isinstance(record, dict) else None
        if isinstance(value, str) and value.strip():
            yield number, value


@transaction.atomic
def create_labeling_project(
    project: Project,
    user: Any,
    *,
    name: str,
    dataset_version: DatasetVersion,
    kind: str,
    labels: list[str] | None = None,
    label_config: str = "",
    text_column: str = "",
    description: str = "",
) -> LabelingProject:
    """Validate everything, then make the Label Studio project and import its tasks in batches.

    Nothing is left half-made: a refusal or an outage before the end removes the Label Studio project and rolls the
    portal's rows back.
    """
    name = (name or "").strip()
    errors: dict[str, list[str]] = {}
    if not name:
        errors["name"] = [_("Give the labeling project a name.")]
    elif len(name) > 100:
        errors["name"] = [_("At most 100 characters.")]
    elif LabelingProject.objects.filter(project=project, name=name).exists():
        errors["name"] = [_("This project already has a labeling project with that name.")]
    if dataset_version.dataset.project_id != project.pk:
        errors["dataset_version"] = [_("Choose a dataset version of this project.")]
    if errors:
        raise ValidationError(errors)
    labels, label_config = label_config_for(kind, list(labels or []), label_config)
    key = configs.data_key(kind, label_config)
    sources = task_sources(dataset_version, kind, key, text_column.strip())

    client = server.connect()
    with client:
        validate_label_config(client, label_config)
        row = LabelingProject.objects.create(
            project=project,
            name=name,
            description=description,
            dataset_version=dataset_version,
            kind=kind,
            labels=labels,
            text_column=text_column.strip(),
            label_config=label_config,
            created_by=user if getattr(user, "pk", None) else None,
            status=LabelingProject.Status.IMPORTING,
        )
        tasks = _insert_tasks(row, [(path, number) for path, number, _value in sources])
        created = client.create_project(
            title=f"{project.slug}/{name}"[:50], label_config=label_config, description=description
        )
        row.ls_project_id = created["id"]
        try:
            import_tasks(client, row, tasks, [value for _path, _number, value in sources], key)
            sync.register_webhook(client, row, settings.LABELING_PORTAL_URL)
        except BaseException:
            try:
                client.delete_project(created["id"])
            except Exception:  # the outage that stopped the import may stop this too: logged, the reconcile repairs
                logger.exception("could not remove Label Studio project %s after a failed import", created["id"])
            raise
        row.status = LabelingProject.Status.READY
        row.task_count = len(tasks)
        row.save(update_fields=["ls_project_id", "status", "task_count"])
    return row


def import_tasks(
    client: LabelStudio, row: LabelingProject, tasks: list[LabelingTask], values: list[Any], key: str
) -> None:
    """Import in batches (SDK: projects.import_tasks); record Label Studio's task ids.

    A batch is LABELING_IMPORT_BATCH tasks (10,000) or about LABELING_IMPORT_BYTES of text (32 MB; Label Studio takes
    200 MB a request), whichever comes first. Few large requests, because each import makes Label Studio recount the
    whole project: 10,000 tasks in batches of 1,000 took 2.9× one request (bench/labeling.py)."""
    for start, end in _batches(values, max(1, settings.LABELING_IMPORT_BATCH), settings.LABELING_IMPORT_BYTES):
        chunk = tasks[start:end]
        body = [
            {
                "data": {
                    key: media_url(task.pk) if value is None else value,
                    "portal_task": task.pk,
                    "path": task.path,
                },
            }
            for task, value in zip(chunk, values[start:end], strict=True)
        ]
        answer = client.import_tasks(row.ls_project_id, body)
        ids = answer.get("task_ids") or []
        if len(ids) != len(chunk):
            raise LabelStudioError(500, f"Label Studio imported {len(ids)} of {len(chunk)} tasks")
        for task, ls_id in zip(chunk, ids, strict=True):
            task.ls_task_id = ls_id
        _record_ls_ids(chunk)


def _insert_tasks(row: LabelingProject, sources: list[tuple[str, int | None]]) -> list[LabelingTask]:
    """The rows of `sources` ((path, row) each), in order. On PostgreSQL one INSERT from two arrays: Django's
    bulk_create compiles every object's values (~2-5 s for 10,000 rows on the loaded host, bench/labeling.py)."""
    if connection.vendor != "postgresql":
        return LabelingTask.objects.bulk_create(
            [LabelingTask(labeling_project=row, path=path, row=number) for path, number in sources]
        )
    meta = LabelingTask._meta
    names = ("labeling_project", "path", "row", "model_version", "state")
    column = {name: meta.get_field(name).column for name in names}
    sql = (  # names from the model, values as parameters; ids come in insertion order (ascending)
        f'INSERT INTO "{meta.db_table}" ("{column["labeling_project"]}", "{column["path"]}", "{column["row"]}", '
        f'"{column["model_version"]}", "{column["state"]}") '
        "SELECT %s, v.path, v.row, '', %s FROM unnest(%s::text[], %s::integer[]) WITH ORDINALITY AS v(path, row, n) "
        f'ORDER BY v.n RETURNING "{meta.pk.column}"'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [row.pk, LabelingTask.State.TODO, [p for p, _n in sources], [n for _p, n in sources]])
        ids = sorted(pk for (pk,) in cursor.fetchall())
    tasks = []
    for pk, (path, number) in zip(ids, sources, strict=True):
        task = LabelingTask(pk=pk, labeling_project=row, path=path, row=number)
        task._state.adding, task._state.db = False, "default"
        tasks.append(task)
    return tasks


def _record_ls_ids(tasks: list[LabelingTask]) -> None:
    """Store each task's Label Studio id: on PostgreSQL one UPDATE from two arrays — Django's bulk_update (a CASE of
    one WHEN per row) took 11.6 s for 10,000 rows where this takes 0.5 s (bench/labeling.py, a loaded host)."""
    if connection.vendor != "postgresql":
        LabelingTask.objects.bulk_update(tasks, ["ls_task_id"], batch_size=1000)
        return
    meta = LabelingTask._meta
    table, pk, column = meta.db_table, meta.pk.column, meta.get_field("ls_task_id").column
    sql = (  # names from the model, values as parameters
        f'UPDATE "{table}" AS t SET "{column}" = v.ls FROM unnest(%s::bigint[], %s::bigint[]) AS v(pk, ls) '
        f'WHERE t."{pk}" = v.pk'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [[t.pk for t in tasks], [t.ls_task_id for t in tasks]])


TASK_OVERHEAD = 300  # bytes of a task's JSON besides its text (keys, the media link, the path)


def _batches(values: list[Any], count: int, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each batch: at most `count` values and, past the first, about `size` bytes of text."""
    start, used = 0, 0
    for index, value in enumerate(values):
        cost = TASK_OVERHEAD + (len(value.encode()) if isinstance(value, str) else 0)
        if index > start and (index - start >= count or used + cost > size):
            yield start, index
            start, used = index, 0
        used += cost
    if start < len(values):
        yield start, len(values)


def delete_labeling_project(row: LabelingProject) -> None:
    """Remove the Label Studio project (its tasks and annotations), then the portal's rows; an outage refuses."""
    if row.ls_project_id is not None:
        with server.connect() as client:
            try:
                client.delete_project(row.ls_project_id)
            except LabelStudioError as exc:
                if exc.status != 404:  # already gone: nothing to remove
                    raise
    row.delete()
