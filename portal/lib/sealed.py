"""Values a workload is handed and the database must never hold in clear: its API token (PORTAL_API_TOKEN,
MLFLOW_TRACKING_TOKEN), a notebook server's own token (JUPYTER_TOKEN).

The stored workload (LocalWorkload.spec, KubeWorkload.spec) has a reference in their place, `${sealed:NONCE:KID}`;
the value is HMAC-SHA256 of the nonce under a key derived from SECRET_KEY (KID names which of SECRET_KEY and
SECRET_KEY_FALLBACKS, so a rotation does not strand a workload dispatched before it). Only the portal's processes
hold that key: the value is computed where the workload starts — in the local agent's memory, handed to the process
(apps/runtime/secretenv.py), or into the workload's own Kubernetes Secret, which
its pods read by secretKeyRef (apps/runtime/kubernetes/apply.py). The tokens table keeps the SHA-256 digest only,
so neither a database dump nor a reader of the specs gets a live token.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Mapping, MutableMapping

from django.conf import settings
from django.utils.crypto import salted_hmac

REF_MARK = "${sealed:"
REF_RE = re.compile(r"^\$\{sealed:([A-Za-z0-9_-]{16,64}):([0-9a-f]{8})\}$")
_SALT = "portal.lib.sealed"


def _keys() -> list[str]:
    return [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]


def _kid(key: str) -> str:
    return hashlib.sha256(f"{_SALT}:kid:{key}".encode()).hexdigest()[:8]


def _derive(nonce: str, key: str) -> str:
    digest = salted_hmac(_SALT, nonce, secret=key, algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new() -> tuple[str, str]:
    """(a fresh reference to store, the value it stands for)."""
    nonce, key = secrets.token_urlsafe(24), settings.SECRET_KEY
    return f"{REF_MARK}{nonce}:{_kid(key)}}}", _derive(nonce, key)


def is_reference(value: object) -> bool:
    return isinstance(value, str) and value.startswith(REF_MARK) and REF_RE.match(value) is not None


def value_of(reference: str) -> str:
    """The value a reference stands for; LookupError when it is malformed or its key is no longer configured."""
    match = REF_RE.match(reference)
    if match is None:
        raise LookupError("not a sealed reference")
    nonce, kid = match.groups()
    for key in _keys():
        if _kid(key) == kid:
            return _derive(nonce, key)
    raise LookupError("the key this value was sealed with is no longer configured (SECRET_KEY was rotated)")


def resolve_env(env: Mapping[str, str]) -> dict[str, str]:
    """{env var: value} of every sealed reference in `env` whose key is still configured."""
    values = {}
    for key, value in env.items():
        if is_reference(value):
            try:
                values[key] = value_of(value)
            except LookupError:
                continue
    return values


def complete_env(env: MutableMapping[str, str]) -> list[str]:
    """Replace the sealed references of `env` by their values, in place (memory only); returns the values, which
    the log writer masks. A reference that cannot be resolved is dropped: the process gets no such variable."""
    values = resolve_env(env)
    for key in [k for k, v in env.items() if is_reference(v)]:
        if key in values:
            env[key] = values[key]
        else:
            del env[key]
    return list(values.values())
