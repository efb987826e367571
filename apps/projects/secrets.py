"""Project secrets: write-only values a project's tasks receive as env vars, and masked in their logs.

Exposure rule (a task gets only the secrets it names, never all of the project's):
- a pipeline's or node's `env` entry whose whole value is a reference, `MY_TOKEN: "${secret:HF_TOKEN}"`,
  gives the task `MY_TOKEN` with the secret's value;
- a template argument of `x-portal-type: secret` whose value is a secret's name, `hf_token: HF_TOKEN`, gives the
  task `PORTAL_SECRET_HF_TOKEN` with the value (the command line carries the name only, never the value).

References are checked when a pipeline is saved or started (field errors name the node and key). Values never
enter the database in plain text: the env stored with a workload keeps the `${secret:NAME}` reference, and the
runtime resolves it where the task starts (apps/runtime/secretenv.py) and the task's sink hands the values to the
log writer, which stores `***` instead of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.projects.models import Project, ProjectSecret, secret_name_validator

REF_RE = re.compile(r"^\$\{secret:([^}]*)\}$")
REF_MARK = "${secret:"
ARG_ENV_PREFIX = "PORTAL_SECRET_"
MASK = "***"
MASK_MIN_LENGTH = 4  # shorter values ("1", "true") would turn ordinary output into stars
MAX_VALUE_CHARS = 64 * 1024


def ref(name: str) -> str:
    """The env value that references secret `name`."""
    return f"{REF_MARK}{name}}}"


def referenced_name(value: Any) -> str | None:
    """The secret an env value references (the whole value must be `${secret:NAME}`), or None."""
    if not isinstance(value, str) or REF_MARK not in value:
        return None
    match = REF_RE.match(value)
    return match.group(1) if match else ""


def arg_env_name(arg: str) -> str:
    """The env var through which a `secret` argument reaches its task: PORTAL_SECRET_<ARG>."""
    return ARG_ENV_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", arg).upper()


# --- Writing ------------------------------------------------------------------------------------------


def _check(name: str, value: str | None, description: str, *, creating: bool) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if creating:
        try:
            secret_name_validator(name)
        except ValidationError as exc:
            errors["name"] = exc.messages
        if len(name) > ProjectSecret._meta.get_field("name").max_length:
            errors.setdefault("name", []).append(_("At most 100 characters."))
    if value is not None:
        if not value:
            errors["value"] = [_("A secret needs a value.")]
        elif len(value) > MAX_VALUE_CHARS:
            errors["value"] = [_("At most 64 KiB.")]
        elif "\x00" in value:
            errors["value"] = [_("The value cannot contain NUL characters.")]
    if len(description) > ProjectSecret._meta.get_field("description").max_length:
        errors["description"] = [_("At most 200 characters.")]
    return errors


def create_secret(project: Project, user: Any, *, name: str, value: str, description: str = "") -> ProjectSecret:
    """Store a new secret. ValidationError names the field (bad name, name taken, empty value); nothing is written."""
    errors = _check(name, value, description, creating=True)
    if "name" not in errors and ProjectSecret.objects.filter(project=project, name=name).exists():
        errors["name"] = [_("This project already has a secret named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)
    secret = ProjectSecret(project=project, name=name, value=value, description=description, created_by=user)
    try:
        with transaction.atomic():
            secret.save()
    except IntegrityError:  # a concurrent create of the same name
        raise ValidationError(
            {"name": [_("This project already has a secret named “%(name)s”.") % {"name": name}]}
        ) from None
    return secret


def update_secret(secret: ProjectSecret, *, value: str | None = None, description: str | None = None) -> ProjectSecret:
    """Replace the value and/or the description (None: keep). The name never changes: pipelines reference it."""
    errors = _check(secret.name, value, description if description is not None else "", creating=False)
    if errors:
        raise ValidationError(errors)
    fields = ["updated_at"]
    if value is not None:
        secret.value = value
        fields.append("value")
    if description is not None:
        secret.description = description
        fields.append("description")
    secret.updated_at = timezone.now()
    secret.save(update_fields=fields)
    return secret


def delete_secret(secret: ProjectSecret) -> None:
    secret.delete()


# --- References ---------------------------------------------------------------------------------------


def spec_references(spec: Mapping[str, Any], secret_args: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """{field key: referenced name} of every secret reference in a normalized pipeline spec.

    `secret_args` maps a node name to the names of its template's `secret` arguments. Keys are the field paths
    errors are reported on: "env.X", "nodes.<node>.env.X", "nodes.<node>.args.<arg>"."""
    refs: dict[str, str] = {}
    for key, value in (spec.get("env") or {}).items():
        name = referenced_name(value)
        if name is not None:
            refs[f"env.{key}"] = name
    for node in spec.get("nodes", []):
        prefix = f"nodes.{node['name']}"
        for key, value in (node.get("env") or {}).items():
            name = referenced_name(value)
            if name is not None:
                refs[f"{prefix}.env.{key}"] = name
        for arg in secret_args.get(node["name"], ()):
            value = (node.get("args") or {}).get(arg)
            if value not in (None, ""):
                refs[f"{prefix}.args.{arg}"] = value if isinstance(value, str) else ""
    return refs


def _existing(project: Project, names: Iterable[str]) -> set[str]:
    return set(ProjectSecret.objects.filter(project=project, name__in=set(names)).values_list("name", flat=True))


def check_spec_references(project: Project, spec: Mapping[str, Any], secret_args: Mapping[str, Iterable[str]]) -> None:
    """ValidationError naming the field of each reference to a secret the project does not have."""
    refs = spec_references(spec, secret_args)
    if not refs:
        return
    existing = _existing(project, refs.values())
    errors: dict[str, list[str]] = {}
    for key, name in refs.items():
        if not name:
            errors[key] = [_("A secret reference is the whole value: ${secret:NAME}.")]
        elif name not in existing:
            errors[key] = [_("The project has no secret named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)


def env_references(env: Mapping[str, str]) -> dict[str, str]:
    """{env var: secret name} of the env entries that reference a secret."""
    return {key: name for key, value in env.items() if (name := referenced_name(value))}


def check_env_references(project: Project, env: Mapping[str, str]) -> None:
    """LookupError naming the first referenced secret the project no longer has (deleted after the run started)."""
    refs = env_references(env)
    if not refs:
        return
    existing = _existing(project, refs.values())
    for key, name in sorted(refs.items()):
        if name not in existing:
            raise LookupError(f"secret {name} (for {key}) was deleted after the run started")


def resolve_env(project_slug: str, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """({env var: value} of every reference in `env` the project has, [names of missing secrets]).

    Called where the task starts, so values live only in the starting process's memory."""
    refs = env_references(env)
    if not refs:
        return {}, []
    values = dict(
        ProjectSecret.objects.filter(project__slug=project_slug, name__in=set(refs.values())).values_list(
            "name", "value"
        )
    )
    resolved = {key: values[name] for key, name in refs.items() if values.get(name)}
    missing = sorted({name for name in refs.values() if not values.get(name)})
    return resolved, missing


def mask_values(values: Iterable[str]) -> list[str]:
    """What the log writer replaces: each value, and each line of a multi-line value (logs are stored by line),
    of at least MASK_MIN_LENGTH characters; longest first, so a value containing another is masked whole."""
    pieces: set[str] = set()
    for value in values:
        for piece in (value, *value.splitlines()):
            piece = piece.strip("\r\n")
            if len(piece) >= MASK_MIN_LENGTH:
                pieces.add(piece)
    return sorted(pieces, key=lambda p: (-len(p), p))
