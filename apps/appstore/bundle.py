"""App bundles on disk and as zips: `app.yaml` (the manifest), `README.md` (the description) and the files the
manifest names (datasets' files, starter notebooks, an icon). A zip is written deterministically (sorted names,
fixed times), so one bundle always has one SHA-256 digest."""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.appstore.manifest import validate_manifest

MANIFEST = "app.yaml"
# libyaml's safe loader where PyYAML has it (the same documents, ~10x faster: every `migrate`, and every test
# database flush, re-reads the built-in bundles), else PyYAML's.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
README = "README.md"
MAX_BUNDLE_BYTES = 20 * 1024 * 1024
MAX_FILES = 500
ZIP_TIME = (2020, 1, 1, 0, 0, 0)
BUILTIN_DIR = Path(settings.BASE_DIR) / "fixtures" / "apps"


@dataclass
class Bundle:
    """A validated bundle in memory: the manifest, the README and every file by its path in the bundle."""

    manifest: dict[str, Any]
    readme: str = ""
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.manifest["metadata"]["name"]

    @property
    def version(self) -> str:
        return self.manifest["metadata"]["version"]

    def to_zip(self) -> bytes:
        """The bundle as a zip (the manifest as written in YAML, the README, the files), byte-for-byte stable."""
        out = io.BytesIO()
        entries = {MANIFEST: yaml.safe_dump(self.manifest, sort_keys=False, allow_unicode=True).encode()}
        if self.readme:
            entries[README] = self.readme.encode()
        entries.update(self.files)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(entries):
                info = zipfile.ZipInfo(path, date_time=ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, entries[path])
        return out.getvalue()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _clean_path(path: str) -> str:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\\" in path:
        raise ValidationError({"bundle": [_("Unsafe path in the bundle: “%(path)s”.") % {"path": path}]})
    return pure.as_posix()


def from_entries(entries: dict[str, bytes]) -> Bundle:
    """A bundle from its files by path (`app.yaml` among them), validated."""
    if MANIFEST not in entries:
        raise ValidationError({"bundle": [_("The bundle has no %(file)s.") % {"file": MANIFEST}]})
    try:
        manifest = yaml.load(entries[MANIFEST].decode("utf-8"), Loader=SAFE_LOADER)  # nosec B506: a safe loader
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValidationError({"manifest": [_("Not valid YAML: %(error)s") % {"error": exc}]}) from None
    files = {path: data for path, data in entries.items() if path not in (MANIFEST, README)}
    validate_manifest(manifest, files=set(files))
    try:
        readme = entries.get(README, b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError({"readme": [_("README.md must be UTF-8 text.")]}) from None
    return Bundle(manifest=manifest, readme=readme, files=files)


def load_folder(folder: Path) -> Bundle:
    """A bundle from a folder (`fixtures/apps/<name>/`)."""
    folder = Path(folder)
    entries: dict[str, bytes] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(folder).as_posix()
        if relative.startswith(".") or "/__pycache__/" in f"/{relative}":
            continue
        entries[relative] = path.read_bytes()
    return from_entries(entries)


def load_zip(data: bytes) -> Bundle:
    """A bundle from a zip's bytes (an upload or an export); refuses unsafe paths and oversized archives."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise ValidationError({"bundle": [_("The bundle is larger than 20 MB.")]})
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ValidationError({"bundle": [_("Not a zip file.")]}) from None
    infos = [info for info in archive.infolist() if not info.is_dir()]
    if len(infos) > MAX_FILES or sum(info.file_size for info in infos) > MAX_BUNDLE_BYTES:
        raise ValidationError({"bundle": [_("The bundle holds too many or too large files.")]})
    with archive:
        return from_entries({_clean_path(info.filename): archive.read(info) for info in infos})


def builtin_folders() -> list[Path]:
    return sorted(p for p in BUILTIN_DIR.iterdir() if (p / MANIFEST).is_file()) if BUILTIN_DIR.is_dir() else []
