"""Dataset workflows: versions, references, materialisation for tasks, lineage, diff and deletion.

For the jobs app (dataset arguments of job templates):

- `resolve_dataset_arg(project, "iris@latest")` → the DatasetVersion ("name", "name@latest", "name@3");
  raises `DatasetRefError` (a ValueError) with a message fit for the user when there is no such version.
- `materialize(version)` → a read-only local directory with the version's files, cached by content digest
  under `PORTAL_WORK_DIR/datasets/<digest>` and built atomically (a half-built copy is never visible).
- `record_usage(version, task_run=…, pipeline_run=…, direction="read"|"write")` → a lineage row.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max, ProtectedError, RestrictedError
from django.utils.translation import gettext as _

from apps.datasets import blobs
from apps.datasets.models import (
    AnalysisStatus,
    Blob,
    Dataset,
    DatasetUsage,
    DatasetVersion,
    Direction,
    UploadFile,
    UploadSession,
    UploadStatus,
    VersionFile,
)
from apps.datasets.paths import clean_path
from apps.outbox.services import enqueue
from apps.projects.models import Project
from portal.lib.errors import Conflict

REF_RE = re.compile(r"^(?P<name>[^@\s]+)(?:@(?P<which>latest|\d+))?$")


class DatasetRefError(ValueError):
    """A dataset reference that names no existing version."""


# --- Datasets and versions ------------------------------------------------------------------------


def create_dataset(project: Project, user: Any, *, name: str, **fields: Any) -> Dataset:
    if Dataset.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": [_("A dataset named “%(name)s” exists in this project.") % {"name": name}]})
    dataset = Dataset(project=project, name=name, created_by=user, **fields)
    dataset.full_clean()
    dataset.save()
    return dataset


def update_dataset(dataset: Dataset, **fields: Any) -> Dataset:
    """Change a dataset's name or description fields; a new name must be free in its project."""
    name = fields.get("name")
    if name and name != dataset.name and Dataset.objects.filter(project=dataset.project, name=name).exists():
        raise ValidationError({"name": [_("A dataset named “%(name)s” exists in this project.") % {"name": name}]})
    for field, value in fields.items():
        setattr(dataset, field, value)
    dataset.save()
    return dataset


def manifest_digest(manifest: dict[str, tuple[str, int]]) -> str:
    """SHA-256 of the canonical manifest: sorted [path, sha256, size] rows as compact JSON."""
    rows = [[path, sha, size] for path, (sha, size) in sorted(manifest.items())]
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def create_version(
    dataset: Dataset,
    manifest: dict[str, tuple[str, int]],
    *,
    user: Any = None,
    message: str = "",
    parent: DatasetVersion | None = None,
    task_run: Any = None,
) -> DatasetVersion:
    """The dataset's next version from {path: (blob sha256, size)} whose blobs are stored already.

    Runs in one transaction (the caller may wrap more around it); analysis is queued after commit.
    """
    from apps.datasets.tasks import analyze_version

    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        number = (dataset.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        if parent is None:
            parent = dataset.versions.order_by("-number").first()
        version = DatasetVersion.objects.create(
            dataset=dataset, number=number, message=message, parent=parent, digest=manifest_digest(manifest),
            total_size=sum(size for _sha, size in manifest.values()), file_count=len(manifest), created_by=user,
            task_run=task_run, pipeline_run_id=getattr(task_run, "run_id", None),
        )  # fmt: skip
        for sha, size in dict(manifest.values()).items():
            Blob.objects.get_or_create(sha256=sha, defaults={"size": size})
        VersionFile.objects.bulk_create(
            VersionFile(version=version, path=path, blob_id=sha, size=size)
            for path, (sha, size) in sorted(manifest.items())
        )
        if task_run is not None:
            record_usage(version, task_run=task_run, direction=Direction.WRITE)
        enqueue(analyze_version, version.pk)  # through the outbox: sent after the commit, even if the broker is down
    return version


def new_bytes(project: Project, shas: Iterable[str]) -> int:
    """Bytes of the given blobs that the project's versions do not use yet (what a commit adds to its quota)."""
    shas = set(shas)
    known = set(
        VersionFile.objects.filter(version__dataset__project=project, blob_id__in=shas).values_list(
            "blob_id", flat=True
        )
    )
    return sum(Blob.objects.filter(pk__in=shas - known).values_list("size", flat=True))


def latest_version(dataset: Dataset) -> DatasetVersion | None:
    return dataset.versions.order_by("-number").first()


def resolve_dataset_arg(project: Project, ref: str) -> DatasetVersion:
    """The version `ref` names in `project`: "name" or "name@latest" (newest), or "name@<number>"."""
    match = REF_RE.match((ref or "").strip())
    if not match:
        raise DatasetRefError(
            _("“%(ref)s” is not a dataset reference: use “name”, “name@latest” or “name@<number>”.") % {"ref": ref}
        )
    name, which = match["name"], match["which"] or "latest"
    dataset = Dataset.objects.filter(project=project, name=name).first()
    if dataset is None:
        raise DatasetRefError(
            _("There is no dataset “%(name)s” in project “%(project)s”.") % {"name": name, "project": project.slug}
        )
    versions = dataset.versions.select_related("dataset__project")
    version = versions.order_by("-number").first() if which == "latest" else versions.filter(number=int(which)).first()
    if version is None:
        if which == "latest":
            raise DatasetRefError(_("Dataset “%(name)s” has no versions yet.") % {"name": name})
        raise DatasetRefError(
            _("Dataset “%(name)s” has no version %(number)s (newest: %(newest)s).")
            % {
                "name": name,
                "number": which,
                "newest": latest_version(dataset).number if latest_version(dataset) else "none",
            }
        )
    return version


# --- Materialisation for tasks -----------------------------------------------------------------


def materialize_root() -> Path:
    return Path(settings.PORTAL_WORK_DIR) / "datasets"


_PATH_TOKEN = re.compile(r"[^\s=:,;\"']+")


def sandbox_paths(workload: Any, env: dict[str, str]) -> list[Path]:
    """The materialised datasets (PORTAL_WORK_DIR/datasets/<digest>) that a sandboxed workload's command or env names
    and that the workload's project has a version of (`hooks.register_readable_paths`). A command's text is the
    user's to write: a digest named there that only another project holds is never shown (equal digests are equal
    content, so a project's own copy leaks nothing)."""
    datasets = materialize_root().absolute()
    named: dict[str, Path] = {}
    for text in [*workload.command, *env.values()]:
        for token in _PATH_TOKEN.findall(str(text)):
            path = Path(token)
            if path.is_absolute() and datasets in path.parents:
                digest = path.relative_to(datasets).parts[0]
                if re.fullmatch(r"[0-9a-f]{64}", digest):
                    named[digest] = datasets / digest
    if not named:
        return []
    owned = DatasetVersion.objects.filter(digest__in=named, dataset__project__slug=workload.project)
    return [named[digest] for digest in set(owned.values_list("digest", flat=True))]


def materialize(version: DatasetVersion) -> Path:
    """A read-only local directory holding the version's files (cached by digest; built atomically).

    On a filesystem store the files are hard links to the blobs (no copy); from S3 they are downloaded.
    Files are mode 0444 and directories 0555. Local tasks run as the portal's user, so the links add no
    exposure the store does not already have; the digest is what makes a cached copy trustworthy.
    """
    root = materialize_root()
    target = root / version.digest
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version.digest[:12]}-", dir=root))
    try:
        for entry in version.files.all().iterator():
            dest = tmp / entry.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            blobs.copy_to(entry.blob_id, dest)
            os.chmod(dest, 0o444)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # lost a race to another builder: theirs is as good as ours
                raise
            _remove_tree(tmp)
            return target
    except BaseException:
        _remove_tree(tmp)
        raise
    for dirpath, dirnames, _files in os.walk(target, topdown=False):
        for d in dirnames:
            os.chmod(Path(dirpath) / d, 0o555)
    os.chmod(target, 0o555)
    return target


def _remove_tree(path: Path) -> None:
    if not path.exists():
        return
    for dirpath, _dirs, _files in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path, ignore_errors=True)


# --- Lineage -------------------------------------------------------------------------------


def record_usage(
    version: DatasetVersion, *, task_run: Any = None, pipeline_run: Any = None, direction: str = Direction.READ
) -> DatasetUsage:
    """Record that a run (or one of its tasks) read or wrote `version`. Idempotent per (version, task, run)."""
    if direction not in Direction.values:
        raise ValueError(f"direction must be one of {Direction.values}, not {direction!r}")
    if pipeline_run is None and task_run is not None:
        pipeline_run = task_run.run
    usage, _created = DatasetUsage.objects.get_or_create(
        version=version, task_run=task_run, pipeline_run=pipeline_run, direction=direction
    )
    return usage


def lineage(dataset: Dataset) -> list[DatasetUsage]:
    return list(
        DatasetUsage.objects.filter(version__dataset=dataset)
        .select_related("version", "pipeline_run", "task_run")
        .order_by("-created_at", "-pk")[:200]
    )


# --- Diff ----------------------------------------------------------------------------------


def diff_versions(old: DatasetVersion, new: DatasetVersion) -> dict[str, Any]:
    """Files added/removed/changed from `old` to `new`, the row-count delta and schema changes per file."""
    a = {f.path: (f.blob_id, f.size) for f in old.files.all()}
    b = {f.path: (f.blob_id, f.size) for f in new.files.all()}
    changed = sorted(p for p in a.keys() & b.keys() if a[p][0] != b[p][0])
    # Schemas come from the analysis: until both versions have one, "every column removed" would be a lie.
    analysed = old.analysis_status == AnalysisStatus.READY and new.analysis_status == AnalysisStatus.READY
    schema_changes: dict[str, dict[str, Any]] | None = {} if analysed else None
    for path in sorted(a.keys() | b.keys()) if analysed else []:
        before = {c["name"]: c["type"] for c in (old.schema or {}).get(path, [])}
        after = {c["name"]: c["type"] for c in (new.schema or {}).get(path, [])}
        if before == after:
            continue
        schema_changes[path] = {
            "added": sorted(after.keys() - before.keys()),
            "removed": sorted(before.keys() - after.keys()),
            "type_changed": {
                k: [before[k], after[k]] for k in sorted(before.keys() & after.keys()) if before[k] != after[k]
            },
        }
    rows_old, rows_new = old.row_count, new.row_count
    return {
        "old": old.number,
        "new": new.number,
        "added": [{"path": p, "size": b[p][1]} for p in sorted(b.keys() - a.keys())],
        "removed": [{"path": p, "size": a[p][1]} for p in sorted(a.keys() - b.keys())],
        "changed": [{"path": p, "old_size": a[p][1], "new_size": b[p][1]} for p in changed],
        "unchanged": len([p for p in a.keys() & b.keys() if a[p][0] == b[p][0]]),
        "rows": {
            "old": rows_old,
            "new": rows_new,
            "delta": (rows_new - rows_old) if rows_old is not None and rows_new is not None else None,
        },
        "schema_changes": schema_changes,
        "analysis_pending": not analysed,
    }


# --- Deletion and garbage collection -----------------------------------------------------------------


def version_in_use(version: DatasetVersion) -> bool:
    return DatasetUsage.objects.filter(version=version).exists()


def delete_version(version: DatasetVersion, *, force: bool = False) -> list[str]:
    """Delete a version; purge the blobs no other version uses. Returns the purged blobs' digests.

    A version that a run read or wrote is kept unless `force`: lineage would point at nothing.
    """
    if not force and version_in_use(version):
        raise ValidationError(
            {
                "force": [
                    _(
                        "Version %(ref)s was used by a pipeline run; "
                        "delete it with force to confirm (its lineage goes too)."
                    )
                    % {"ref": version.ref}
                ]
            }
        )
    shas = set(version.files.values_list("blob_id", flat=True))
    with transaction.atomic():
        DatasetVersion.objects.filter(pk=version.pk).delete()
    return purge_blobs(shas)


def delete_dataset(dataset: Dataset, *, force: bool = False) -> list[str]:
    """Delete the dataset with its versions; purge the blobs no other dataset uses. Returns the purged digests.

    Runs that used it need `force` (their lineage goes); what is configured around it (a retrain policy, a data
    monitor) refuses with a Conflict naming it, even with `force`: that is for the user to change or delete first.
    """
    versions = list(dataset.versions.all())
    if not force and DatasetUsage.objects.filter(version__dataset=dataset).exists():
        raise ValidationError(
            {
                "force": [
                    _("Versions of “%(name)s” were used by pipeline runs; delete it with force to confirm.")
                    % {"name": dataset.name}
                ]
            }
        )
    shas = set(VersionFile.objects.filter(version__in=versions).values_list("blob_id", flat=True))
    shas |= set(
        UploadFile.objects.filter(session__dataset=dataset).exclude(blob=None).values_list("blob_id", flat=True)
    )
    from apps.datasets.uploads import session_dir

    sessions = list(dataset.uploads.all())
    try:
        with transaction.atomic():
            dataset.delete()
    except (ProtectedError, RestrictedError) as exc:
        raise Conflict.from_protected(exc, dataset) from None
    for session in sessions:
        shutil.rmtree(session_dir(session), ignore_errors=True)
    return purge_blobs(shas)


def forget_project_datasets(project: Any) -> None:
    """A project is being deleted (inside its transaction): its datasets' rows go with it; once that commits, the
    blobs no other project's version uses and the staging folders of its uploads go too."""
    from apps.datasets.uploads import session_dir

    shas = set(VersionFile.objects.filter(version__dataset__project=project).values_list("blob_id", flat=True))
    uploads = UploadFile.objects.filter(session__dataset__project=project).exclude(blob=None)
    shas |= set(uploads.values_list("blob_id", flat=True))
    folders = [session_dir(session) for session in UploadSession.objects.filter(dataset__project=project)]

    def purge() -> None:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        purge_blobs(shas)

    transaction.on_commit(purge)


def purge_blobs(shas: Iterable[str]) -> list[str]:
    """Delete those of `shas` that no version and no open upload uses (rows, then stored bytes)."""
    shas = set(shas)
    if not shas:
        return []
    with transaction.atomic():
        used = set(VersionFile.objects.filter(blob_id__in=shas).values_list("blob_id", flat=True))
        used |= set(
            UploadFile.objects.filter(blob_id__in=shas, session__status=UploadStatus.OPEN).values_list(
                "blob_id", flat=True
            )
        )
        unused = sorted(shas - used)
        UploadFile.objects.filter(blob_id__in=unused).update(blob=None)
        Blob.objects.filter(pk__in=unused).delete()
    for sha in unused:
        blobs.delete(sha)
        thumb = f"thumbs/{sha}.png"
        if blobs.storage().exists(thumb):
            blobs.storage().delete(thumb)
    return unused


def purge_unused_blobs() -> list[str]:
    """Every blob row no version and no open upload references (the periodic sweep)."""
    return purge_blobs(Blob.objects.values_list("pk", flat=True))


def store_file(source: Path) -> tuple[str, int]:
    """Hash a local file and put it in the blob store (a copy; the source stays). Returns (sha256, size)."""
    sha = blobs.sha256_of(source)
    size = source.stat().st_size
    blobs.put(source, sha, size)
    return sha, size


def version_from_directory(
    dataset: Dataset, directory: Path, *, user: Any = None, message: str = "", task_run: Any = None
) -> DatasetVersion:
    """A new version holding exactly the files under `directory` (the server-side twin of `publish`)."""
    directory = Path(directory)
    manifest: dict[str, tuple[str, int]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
        manifest[clean_path(path.relative_to(directory).as_posix())] = store_file(path)
    if not manifest:
        raise ValidationError({"files": [_("A version needs at least one file.")]})
    return create_version(dataset, manifest, user=user, message=message, task_run=task_run)
