"""Every object is checked before it is applied, against the schemas of the cluster's Kubernetes version.

Core kinds (Job, Deployment, Service, …) go through `kubernetes_validate.validate(obj, version, strict=True)`:
Kubernetes' own OpenAPI schemas, where an unknown field is an error. Custom resources (PyTorchJob, Volcano Job,
RayJob, InferenceService, …) go through the JSON schemas in k8s/crds/ (one file per group/version/kind, named by
its `x-kubernetes-group-version-kind`); those refer to the core definitions of the same Kubernetes version for
what they embed (pod templates, tolerations, resources), so a typo inside a PyTorchJob's pod template fails as it
would in a Pod. A kind known to neither is a failure, never a silent pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
from django.conf import settings
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from kubernetes_validate.utils import all_versions, schema_contents
from packaging.version import Version
from referencing import Registry, Resource

CRD_DIR = Path(settings.BASE_DIR) / "k8s" / "crds"


class ManifestInvalid(ValueError):
    """An object the cluster would refuse; the message names the kind, the name and the failing path."""

    def __init__(self, message: str, *, kind: str = "", name: str = "", path: str = "", version: str = "") -> None:
        super().__init__(message)
        self.kind, self.name, self.path, self.version = kind, name, path, version


def _minor(version: str) -> tuple[int, int]:
    try:
        release = Version(str(version).lstrip("v")).release
    except ValueError:
        raise ManifestInvalid(f"not a Kubernetes version: {version!r} (use e.g. 1.33)") from None
    return (*release, 0)[:2]


@cache
def schema_version(version: str) -> str:
    """The schema set that applies to Kubernetes `version`: the newest kubernetes-validate ships that is not newer
    (as kubernetes-validate itself chooses), e.g. "1.33.0". ManifestInvalid outside the range it ships."""
    wanted = _minor(version)
    shipped = sorted(all_versions(), key=Version)
    usable = [v for v in shipped if _minor(v) <= wanted]
    if wanted > _minor(shipped[-1]) or not usable:
        raise ManifestInvalid(
            f"Kubernetes {version}: kubernetes-validate {kubernetes_validate.__version__} has schemas for"
            f" {shipped[0]} to {shipped[-1]} only",
            version=version,
        )
    return usable[-1]


@cache
def _core_registry(schema: str) -> Registry:
    """The core definitions (strict: no unknown fields) of one Kubernetes version, for the CRD schemas' $refs."""
    definitions = schema_contents(f"kubernetes-json-schema/v{schema}-local-strict/_definitions.json", schema)
    return Resource.from_contents(definitions) @ Registry()


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → the JSON schema we hold for that custom resource."""
    schemas = {}
    for path in sorted(CRD_DIR.glob("*.json")):
        schema = json.loads(path.read_text())
        for gvk in schema["x-kubernetes-group-version-kind"]:
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            schemas[(api_version, gvk["kind"])] = schema
    return schemas


@cache
def _crd_validator(api_version: str, kind: str, schema: str) -> Draft202012Validator:
    return Draft202012Validator(crd_schemas()[(api_version, kind)], registry=_core_registry(schema))


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(the object)"


def _message(error: Any) -> str:
    """jsonschema's message, without the whole instance it quotes for `contains` and the like: where a schema
    explains the rule (our CRD files do for the operators' own checks), its description says it better."""
    if error.validator in ("contains", "not", "oneOf", "anyOf") and error.schema.get("description"):
        return error.schema["description"]
    return error.message if len(error.message) <= 300 else f"{error.message[:300]}…"


def _invalid(obj: dict[str, Any], version: str, path: Iterable[Any], message: str) -> ManifestInvalid:
    kind = str(obj.get("kind") or "?")
    name = str((obj.get("metadata") or {}).get("name") or "?")
    where = _path(path)
    return ManifestInvalid(
        f"{kind} {name}: {where}: {message} (Kubernetes {version})", kind=kind, name=name, path=where, version=version
    )


def validate(obj: dict[str, Any], version: str = "1.33") -> None:
    """Raise ManifestInvalid unless a cluster of Kubernetes `version` (with our CRDs) would accept `obj`."""
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
        raise ManifestInvalid(f"not a Kubernetes object (no apiVersion and kind): {str(obj)[:100]}", version=version)
    schema = schema_version(version)
    key = (obj["apiVersion"], obj["kind"])
    if key in crd_schemas():
        error = best_match(_crd_validator(*key, schema).iter_errors(obj))
        if error is not None:
            raise _invalid(obj, version, error.absolute_path, _message(error))
        return
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise _invalid(obj, version, exc.path, _message(exc)) from None
    except kubernetes_validate.SchemaNotFoundError:
        raise _invalid(
            obj, version, (), f"unknown kind {key[0]} {key[1]}: no core schema and no schema in k8s/crds/"
        ) from None


def schema_errors(obj: dict[str, Any], version: str = "1.33") -> dict[str, list[str]]:
    """Every place where a custom resource we hold a schema for breaks it, keyed by path (`spec.parameters[1].name`):
    what an import shows at once, where `validate` stops at the best match."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in crd_schemas():
        raise ManifestInvalid(f"no schema in k8s/crds/ for {key[0]} {key[1]}", version=version)
    found: dict[str, list[str]] = {}
    for error in _crd_validator(*key, schema_version(version)).iter_errors(obj):
        bucket = found.setdefault(_path(error.absolute_path), [])
        if _message(error) not in bucket:
            bucket.append(_message(error))
    return found


def validate_all(objs: Iterable[dict[str, Any]], version: str = "1.33") -> None:
    """Check every object; one ManifestInvalid listing each failure (its attributes are the first one's)."""
    errors: list[ManifestInvalid] = []
    for obj in objs:
        try:
            validate(obj, version)
        except ManifestInvalid as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        first = errors[0]
        raise ManifestInvalid(
            "; ".join(str(e) for e in errors), kind=first.kind, name=first.name, path=first.path, version=version
        )
