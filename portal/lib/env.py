"""Strict readers of environment variables (healthchecks' envbool/envint/envsecret).

A wrong value fails loudly at start-up instead of silently meaning something else.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def envsecret(name: str, default: str = "") -> str:
    """A secret from `NAME` or from the file named by `NAME_FILE` (Docker/Kubernetes secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE points at {path!r}, which cannot be read: {exc}") from None
    return os.environ.get(name, default)


def envprefixed(prefix: str) -> dict[str, str]:
    """{name: value} of every `PREFIX_NAME` variable, the name lowercased (`PORTAL_TASK_ENV_TRAIN` → "train")."""
    found = {}
    for key, value in os.environ.items():
        if not key.startswith(prefix) or key == prefix:
            continue
        if not value.strip():
            raise ImproperlyConfigured(f"{key} is set but empty; unset it or give it a value")
        found[key[len(prefix) :].lower()] = value.strip()
    return found
