"""Validation of file paths inside a version: relative, normalised, no traversal."""

from __future__ import annotations

import posixpath
import re

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

MAX_PATH = 1000
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def clean_path(raw: str, *, field: str = "path") -> str:
    """The normalised relative path, or a ValidationError naming what is wrong with it.

    Rejects absolute paths, `..` components, backslashes, control characters, drive letters and empties,
    whether they come from an API client, a browser or an archive member.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ValidationError({field: [_("Give a file path.")]})
    if len(raw) > MAX_PATH:
        raise ValidationError({field: [_("The path is longer than %(n)d characters.") % {"n": MAX_PATH}]})
    if _BAD_CHARS.search(raw):
        raise ValidationError(
            {field: [_("“%(path)s”: backslashes and control characters are not allowed.") % {"path": raw}]}
        )
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw):
        raise ValidationError({field: [_("“%(path)s”: absolute paths are not allowed.") % {"path": raw}]})
    parts = raw.split("/")
    if ".." in parts:
        raise ValidationError({field: [_("“%(path)s”: “..” is not allowed in a path.") % {"path": raw}]})
    path = posixpath.normpath(raw)
    if path in (".", "") or raw.endswith("/"):
        raise ValidationError({field: [_("“%(path)s” is not a file path.") % {"path": raw}]})
    return path


def join_prefix(prefix: str, member: str) -> str:
    """`member` of an archive uploaded under `prefix` ("" or a directory), validated."""
    member = clean_path(member, field="archive")
    return clean_path(f"{prefix.rstrip('/')}/{member}" if prefix else member, field="archive")
