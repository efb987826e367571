"""The project storage quota (`Quota.storage_bytes`): distinct blobs of the project's versions + open uploads, plus
what other apps store for the project (tracking artifacts; apps/projects/storage.py)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _

from apps.datasets.models import Blob, UploadFile, UploadStatus, VersionFile
from apps.projects.models import Project
from apps.projects.storage import storage_limit, used_bytes

USAGE = "datasets"  # this app's name in the storage registry


def stored_bytes(project: Project) -> int:
    """Bytes of the distinct blobs the project's versions use (a file shared by versions counts once)."""
    used = VersionFile.objects.filter(version__dataset__project=project).values("blob_id")
    return Blob.objects.filter(pk__in=used).aggregate(total=Sum("size"))["total"] or 0


def usage(project: Project) -> int:
    """What the datasets of `project` count against its quota (registered in apps/datasets/apps.py)."""
    return stored_bytes(project) + pending_bytes(project)


def pending_bytes(project: Project, exclude_session=None) -> int:
    """Bytes announced by the project's open uploads (reserved until they commit or expire)."""
    rows = UploadFile.objects.filter(session__project=project, session__status=UploadStatus.OPEN)
    if exclude_session is not None:
        rows = rows.exclude(session=exclude_session)
    return rows.aggregate(total=Sum("size"))["total"] or 0


def check_quota(project: Project, extra: int, *, exclude_session=None) -> None:
    """ValidationError with a clear message when `extra` more bytes would exceed the project's quota."""
    limit = storage_limit(project)
    if limit is None or extra <= 0:
        return
    used = stored_bytes(project) + pending_bytes(project, exclude_session) + used_bytes(project, exclude=[USAGE])
    if used + extra > limit:
        raise ValidationError(
            {
                "size": [
                    _(
                        "Storage quota exceeded: this needs %(need)s but project “%(project)s” has %(left)s left "
                        "of its %(limit)s quota (%(used)s in use). Delete old versions or ask an admin to raise it."
                    )
                    % {
                        "need": filesizeformat(extra),
                        "project": project.slug,
                        "left": filesizeformat(max(limit - used, 0)),
                        "limit": filesizeformat(limit),
                        "used": filesizeformat(used),
                    }
                ]
            }
        )
