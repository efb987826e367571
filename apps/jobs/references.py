"""Arguments that name other objects of the project: `x-portal-type: dataset` (and, with the registry,
`model`). They are checked when a pipeline is saved or started, pinned to an exact version when a run is
frozen (so "iris@latest" means the version that was newest when the run started, and caching keys on its
content digest), and turned into a read-only local path when the task is dispatched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError

from apps.datasets.models import DatasetVersion
from apps.datasets.services import DatasetRefError, materialize, record_usage, resolve_dataset_arg
from apps.jobs.models import JobTemplate, TaskRun
from apps.projects.secrets import check_spec_references

# Names that an argument of `x-portal-type: <kind>` may take, from the apps above jobs that own such objects (the
# models app registers `model`), for the pipeline editor's suggestions.
_choices: dict[str, Callable[[Any], list[str]]] = {}


def register_reference_choices(kind: str, names: Callable[[Any], list[str]]) -> None:
    """Called from an AppConfig.ready(): `names(project)` lists what a `kind` argument may name in the project."""
    _choices[kind] = names


def registered_choices(project: Any) -> dict[str, list[str]]:
    return {kind: names(project) for kind, names in _choices.items()}


def dataset_arg_names(template: JobTemplate) -> list[str]:
    properties = (template.args_schema or {}).get("properties", {})
    return [name for name, prop in properties.items() if prop.get("x-portal-type") == "dataset"]


def secret_arg_names(template: JobTemplate) -> list[str]:
    properties = (template.args_schema or {}).get("properties", {})
    return [name for name, prop in properties.items() if prop.get("x-portal-type") == "secret"]


def check_references(project: Any, spec: dict[str, Any], templates: dict[str, JobTemplate]) -> dict[str, Any]:
    """Resolve every dataset argument of the normalized `spec`: {node: {arg: version}}. Raises a
    ValidationError naming the node and argument of each reference that does not resolve."""
    errors: dict[str, list[str]] = {}
    resolved: dict[str, dict[str, Any]] = {}
    for node in spec["nodes"]:
        template = templates[node["name"]]
        for arg in dataset_arg_names(template):
            value = node["args"].get(arg)
            if value in (None, ""):
                continue
            try:
                resolved.setdefault(node["name"], {})[arg] = resolve_dataset_arg(project, str(value))
            except DatasetRefError as exc:
                errors[f"nodes.{node['name']}.args.{arg}"] = [str(exc)]
    try:  # secrets named by env references and `secret` arguments must exist (apps/projects/secrets.py)
        check_spec_references(project, spec, {n["name"]: secret_arg_names(templates[n["name"]]) for n in spec["nodes"]})
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return resolved


def pin(node: dict[str, Any], versions: dict[str, Any]) -> None:
    """Record in a frozen node the exact versions its dataset arguments name."""
    node["datasets"] = {
        arg: {"ref": node["args"][arg], "version_id": v.pk, "number": v.number, "digest": v.digest}
        for arg, v in versions.items()
    }


def local_args(task: TaskRun, node: dict[str, Any]) -> dict[str, Any]:
    """The node's arguments as the command line gets them: pinned datasets as local read-only folders.
    Records that the task reads each version (lineage)."""
    args = dict(node.get("args", {}))
    pinned = node.get("datasets") or {}
    if pinned:
        versions = DatasetVersion.objects.in_bulk([p["version_id"] for p in pinned.values()])
        for arg, p in pinned.items():
            version = versions.get(p["version_id"])
            if version is None:
                raise LookupError(f"dataset version {p['ref']} (v{p['number']}) was deleted after the run started")
            args[arg] = str(materialize(version))
            record_usage(version, task_run=task)
    return args
