"""Expanding uploaded zip and tar archives into blobs, safely.

Every member name goes through `paths.join_prefix` (no `..`, no absolute paths); links, devices and FIFOs are
refused; bytes are counted as they are decompressed (headers can lie), against a total cap, a compression-ratio
cap and the project quota. On any refusal the blobs this expansion created are deleted again.
"""

from __future__ import annotations

import hashlib
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.datasets import blobs
from apps.datasets.models import UploadSession
from apps.datasets.paths import join_prefix
from apps.datasets.quota import check_quota

BLOCK = 1024 * 1024


def limits() -> tuple[int, int, int]:
    """(max expanded bytes, max compression ratio, max members), from settings with safe defaults."""
    return (
        int(getattr(settings, "DATASETS_ARCHIVE_MAX_BYTES", 100 * 2**30)),
        int(getattr(settings, "DATASETS_ARCHIVE_MAX_RATIO", 200)),
        int(getattr(settings, "DATASETS_ARCHIVE_MAX_MEMBERS", 100_000)),
    )


def _bomb(detail: str) -> ValidationError:
    return ValidationError(
        {"archive": [_("The archive was refused: %(detail)s. Nothing was stored.") % {"detail": detail}]}
    )


def _members(archive: Path) -> Iterator[tuple[str, IO[bytes]]]:
    """(name, stream) of each regular file; refuses links and special files."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise _bomb(_("“%(name)s” is a symbolic link") % {"name": info.filename})
                if info.is_dir():
                    continue
                with zf.open(info) as stream:
                    yield info.filename, stream
        return
    if not tarfile.is_tarfile(archive):
        raise ValidationError({"archive": [_("This is neither a zip nor a tar archive.")]})
    with tarfile.open(archive, mode="r:*") as tf:
        for member in tf:
            if member.isdir():
                continue
            if member.issym() or member.islnk():
                raise _bomb(_("“%(name)s” is a link") % {"name": member.name})
            if not member.isfile():
                raise _bomb(_("“%(name)s” is not a regular file") % {"name": member.name})
            stream = tf.extractfile(member)
            if stream is None:
                continue
            with stream:
                yield member.name, stream


def expand(archive: Path, prefix: str, session: UploadSession) -> dict[str, tuple[str, int]]:
    """Store each member as a blob; returns {path: (sha256, size)} for the manifest."""
    max_bytes, max_ratio, max_members = limits()
    archive_size = archive.stat().st_size
    # Members come from the archive's own compressed bytes: past `ratio` × that size it is a bomb (small
    # archives get 64 MiB of slack, text compresses well).
    cap = min(max_bytes, max(archive_size * max_ratio, 64 * 2**20))
    entries: dict[str, tuple[str, int]] = {}
    created: list[str] = []
    total = 0
    try:
        for count, (name, stream) in enumerate(_members(archive), start=1):
            if count > max_members:
                raise _bomb(_("more than %(n)d files") % {"n": max_members})
            path = join_prefix(prefix, name)
            if path in entries:
                raise _bomb(_("“%(path)s” appears twice") % {"path": path})
            digest = hashlib.sha256()
            size = 0
            with tempfile.NamedTemporaryFile(dir=archive.parent, delete=False) as tmp:
                tmp_path = Path(tmp.name)
                try:
                    while block := stream.read(BLOCK):
                        size += len(block)
                        total += len(block)
                        if total > cap:
                            raise _bomb(
                                _("it expands past %(cap)d bytes (%(ratio)d× its size or the %(max)d-byte limit)")
                                % {"cap": cap, "ratio": max_ratio, "max": max_bytes}
                            )
                        digest.update(block)
                        tmp.write(block)
                except BaseException:
                    tmp_path.unlink(missing_ok=True)
                    raise
            sha = digest.hexdigest()
            _blob, was_new = blobs.put(tmp_path, sha, size, move=True)
            if was_new:
                created.append(sha)
            entries[path] = (sha, size)
        check_quota(session.project, total, exclude_session=session)
    except (ValidationError, zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as exc:
        from apps.datasets.services import purge_blobs

        purge_blobs(created)
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError({"archive": [_("The archive is damaged: %(error)s") % {"error": exc}]}) from exc
    if not entries:
        raise ValidationError({"archive": [_("The archive contains no files.")]})
    return entries
