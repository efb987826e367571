"""The built-in job templates: `fixtures/job_templates.yaml` loaded into JobTemplate rows with no project.

Loading is idempotent. An entry equal to its latest row is left alone; a changed entry becomes a new row
with the next version, and older versions stay because frozen runs refer to them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction

from apps.jobs.args import with_order
from apps.jobs.dag import node_strategy
from apps.jobs.models import TEMPLATE_TEXT_CONTEXT, JobTemplate
from apps.runtime.strategy import StrategyError
from portal.lib import schemas

FIXTURE = Path(settings.BASE_DIR) / "fixtures" / "job_templates.yaml"
# libyaml's safe loader where PyYAML has it (the same documents, ~10x faster: every `migrate`, and every test
# database flush, re-reads this file), else PyYAML's.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What an entry may set; together they decide whether an entry differs from its latest version.
FIELDS = (
    "name",
    "category",
    "description",
    "image",
    "command",
    "workdir",
    "env",
    "args_schema",
    "resources",
    "kind",
    "framework",
    "replicas",
    "strategy",
    "timeout",
    "side_effects",
)


def load_builtin_templates(path: Path | str | None = None) -> list[JobTemplate]:
    """Create or version the built-in templates; returns the current version of each, in file order."""
    path = Path(path) if path is not None else FIXTURE
    entries = read_entries(path)
    return [_sync(slug, values) for slug, values in entries]


def read_entries(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(slug, field values) per entry, checked up front so that a bad file changes nothing."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)  # nosec B506: a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise ImproperlyConfigured(f"{path}: cannot read the built-in templates: {exc}") from exc
    if not isinstance(data, list):
        raise ImproperlyConfigured(f"{path}: expected a list of templates")
    entries: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for number, entry in enumerate(data, start=1):
        where = f"{path}: template #{number}"
        if not isinstance(entry, dict) or not entry.get("slug"):
            raise ImproperlyConfigured(f"{where}: a mapping with a slug is required")
        slug = str(entry["slug"])
        where = f"{path}: template {slug!r}"
        if slug in seen:
            raise ImproperlyConfigured(f"{where}: the slug appears twice")
        seen.add(slug)
        unknown = set(entry) - {"slug", *FIELDS}
        if unknown:
            raise ImproperlyConfigured(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        values = {name: entry[name] for name in FIELDS if name in entry}
        if "args_schema" in values:
            values["args_schema"] = with_order(values["args_schema"])
        _check(where, slug, values)
        entries.append((slug, values))
    return entries


def _check(where: str, slug: str, values: dict[str, Any]) -> None:
    command = values.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
        raise ImproperlyConfigured(f"{where}: command must be a non-empty list of strings")
    problems = schemas.schema_problems(values.get("args_schema") or {})
    if problems:
        listed = "; ".join(f"{at}: {message}" for at, message in problems)
        raise ImproperlyConfigured(f"{where}: args_schema is not valid JSON Schema: {listed}")
    try:
        JobTemplate(slug=slug, **values).full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ImproperlyConfigured(f"{where}: {exc.message_dict}") from exc
    if values.get("strategy"):
        template = JobTemplate(slug=slug, **values)
        try:
            node_strategy(template, {}, template.resources or {})
        except StrategyError as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from exc


def _sync(slug: str, values: dict[str, Any]) -> JobTemplate:
    candidate = JobTemplate(slug=slug, project=None, **values)  # unset fields take the model's defaults
    for _attempt in range(2):
        latest = JobTemplate.objects.filter(project__isnull=True, slug=slug).order_by("-version").first()
        if latest is not None and _same(latest, candidate):
            return latest
        candidate.pk = None
        candidate.version = latest.version + 1 if latest else 1
        try:
            with transaction.atomic():
                candidate.save(force_insert=True)
        except IntegrityError:
            continue  # another process loaded the same version first: compare with theirs
        return candidate
    raise RuntimeError(f"built-in template {slug!r}: could not claim a new version (concurrent loads?)")


def _same(row: JobTemplate, candidate: JobTemplate) -> bool:
    return all(getattr(row, name) == getattr(candidate, name) for name in FIELDS)


TEXT_MODULE = Path(__file__).with_name("builtin_text.py")


def builtin_text_module(path: Path | str | None = None) -> str:
    """The source of apps/jobs/builtin_text.py: a `pgettext_lazy` per distinct name, category and description of
    the built-ins, so that makemessages finds them (`manage.py builtin_text` writes it; a test checks it is current).
    Each call is written out one argument a line, as `ruff format` keeps it."""
    path = Path(path) if path is not None else FIXTURE
    texts: dict[str, None] = {}
    for _slug, values in read_entries(path):
        for field in ("name", "category", "description"):
            text = values.get(field)
            if text:
                texts.setdefault(str(text), None)
    lines = [
        '"""The built-in job templates\' names, categories and descriptions, for makemessages. Generated from',
        'fixtures/job_templates.yaml by `manage.py builtin_text`: do not edit (a test checks it is current)."""',
        "",
        "from django.utils.translation import pgettext_lazy",
        "",
        "TEXTS = (",
    ]
    for text in texts:
        lines += [
            "    pgettext_lazy(",
            f"        {json.dumps(TEMPLATE_TEXT_CONTEXT)},",
            f"        {_literal(text)},",
            "    ),",
        ]
    lines.append(")")
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """A Python string literal in the quotes `ruff format` picks: double unless single need fewer escapes."""
    if text.count('"') > text.count("'"):
        return repr(text)  # single-quoted, since the text has a double quote
    return json.dumps(text, ensure_ascii=False)
