"""The bundle manifest (`app.yaml`, `apiVersion: portal/v1`, `kind: App`): its shape, checked with errors keyed by
the field's path (`spec.pipelines[0].nodes[2].template`), and the substitution of install parameters.

    apiVersion: portal/v1
    kind: App
    metadata: {name, version, title, summary, icon, category, tags, licence}
    spec:
      parameters: JSON Schema (object) of what the install form asks
      resources: {cpu, memory, gpu}     what the app needs while it runs (shown on its page)
      datasets / templates / models / pipelines / services / knowledge_bases / notebooks / studies:
          lists, one entry per object it creates
      ready: {pipeline: <name>, service: <name>}   what "ready" means for this app

Every string of `spec` may hold `{{ install }}` (the installation's name) and `{{ params.<name> }}`; a string that is
only one placeholder takes the parameter's value with its type (a number stays a number).
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.jobs.args import FieldErrors, validate_args, validate_args_schema

API_VERSION = "portal/v1"
KIND = "App"
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,2}([-+][0-9A-Za-z.-]+)?$")
PLACEHOLDER = re.compile(r"\{\{\s*(install|params\.([A-Za-z_][A-Za-z0-9_-]*))\s*\}\}")
METADATA_STRINGS = ("title", "summary", "icon", "category", "licence")
# What an entry of each section must name; the installers check the rest when they create the object.
REQUIRED = {
    "datasets": ("name",),
    "templates": ("slug", "name", "command"),
    "models": ("name",),
    "pipelines": ("name", "nodes"),
    "services": ("name",),  # and `model`, unless it serves the packaged chat model (framework llm)
    "notebooks": ("name",),
    "studies": ("name", "objectives", "space", "trial_template"),
    "knowledge_bases": ("name",),
}


def validate_manifest(
    manifest: Any, *, files: set[str] | None = None, known_kinds: set[str] | None = None
) -> dict[str, Any]:
    """The manifest if it is well formed; otherwise `ValidationError` keyed by the fields' paths. `files`: the
    bundle's file paths (files a dataset or notebook names must be among them); `known_kinds`: the sections that
    have an installer (default: those registered)."""
    from apps.appstore.installers import installer_kinds

    kinds = known_kinds if known_kinds is not None else set(installer_kinds())
    errors = FieldErrors()
    if not isinstance(manifest, dict):
        raise ValidationError({"manifest": [_("The manifest must be a mapping.")]})
    if manifest.get("apiVersion") != API_VERSION:
        errors.add("apiVersion", _("Must be “%(value)s”.") % {"value": API_VERSION})
    if manifest.get("kind") != KIND:
        errors.add("kind", _("Must be “%(value)s”.") % {"value": KIND})
    unknown = set(manifest) - {"apiVersion", "kind", "metadata", "spec"}
    for key in sorted(unknown):
        errors.add(key, _("Unknown field."))
    _check_metadata(manifest.get("metadata"), errors)
    spec = manifest.get("spec")
    if not isinstance(spec, dict):
        errors.add("spec", _("A mapping is required."))
        errors.raise_if_any()
    _check_spec(spec, errors, files or set(), kinds)
    errors.raise_if_any()
    return manifest


def _check_metadata(metadata: Any, errors: FieldErrors) -> None:
    if not isinstance(metadata, dict):
        errors.add("metadata", _("A mapping is required."))
        return
    name = metadata.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        errors.add("metadata.name", _("Lower-case letters, digits and hyphens, at most 50 characters."))
    version = metadata.get("version")
    if not isinstance(version, str) or not VERSION_RE.match(version):
        errors.add("metadata.version", _("A version such as 1.0.0 is required."))
    if not isinstance(metadata.get("title"), str) or not metadata.get("title", "").strip():
        errors.add("metadata.title", _("A title is required."))
    for key in METADATA_STRINGS:
        if key in metadata and not isinstance(metadata[key], str):
            errors.add(f"metadata.{key}", _("Must be a string."))
    tags = metadata.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        errors.add("metadata.tags", _("Must be a list of words."))
    for key in sorted(set(metadata) - {"name", "version", "tags", *METADATA_STRINGS}):
        errors.add(f"metadata.{key}", _("Unknown field."))


def _check_spec(spec: dict[str, Any], errors: FieldErrors, files: set[str], kinds: set[str]) -> None:
    try:
        validate_args_schema(spec.get("parameters") or {})
    except ValidationError as exc:
        for message in exc.messages:
            errors.add("spec.parameters", message)
    resources = spec.get("resources", {})
    if not isinstance(resources, dict):
        errors.add("spec.resources", _("A mapping is required."))
    names: dict[str, set[str]] = {}
    for section in sorted(set(spec) - {"parameters", "resources", "ready"}):
        if section not in kinds:
            errors.add(f"spec.{section}", _("Unknown kind of object: nothing installs it."))
            continue
        entries = spec[section]
        if not isinstance(entries, list):
            errors.add(f"spec.{section}", _("A list is required."))
            continue
        seen = names.setdefault(section, set())
        for index, entry in enumerate(entries):
            where = f"spec.{section}[{index}]"
            if not isinstance(entry, dict):
                errors.add(where, _("A mapping is required."))
                continue
            for key in REQUIRED.get(section, ("name",)):
                if entry.get(key) in (None, "", []):
                    errors.add(f"{where}.{key}", _("This field is required."))
            key = entry.get("slug") if section == "templates" else entry.get("name")
            if isinstance(key, str) and key in seen:
                errors.add(f"{where}.name", _("Appears twice in %(section)s.") % {"section": section})
            seen.add(key)
            for index_file, path in enumerate(entry.get("files", []) if isinstance(entry.get("files"), list) else []):
                if path not in files:
                    errors.add(f"{where}.files[{index_file}]", _("No file “%(path)s” in the bundle.") % {"path": path})
            if "files" in entry and not isinstance(entry["files"], list):
                errors.add(f"{where}.files", _("A list of the bundle's file paths is required."))
    _check_pipelines(spec, errors, names)
    _check_services(spec, errors, names)
    _check_knowledge_bases(spec, errors, names)
    ready = spec.get("ready", {})
    if not isinstance(ready, dict):
        errors.add("spec.ready", _("A mapping is required."))
    else:
        for key, section in (("pipeline", "pipelines"), ("service", "services")):
            if key in ready and ready[key] not in names.get(section, set()):
                errors.add(f"spec.ready.{key}", _("Names nothing in spec.%(section)s.") % {"section": section})


def _check_pipelines(spec: dict[str, Any], errors: FieldErrors, names: dict[str, set[str]]) -> None:
    from apps.jobs.models import JobTemplate

    own = names.get("templates", set())
    builtin = set(JobTemplate.objects.filter(project__isnull=True).values_list("slug", flat=True))
    for index, pipeline in enumerate(spec.get("pipelines") or []):
        if not isinstance(pipeline, dict):
            continue
        nodes = pipeline.get("nodes")
        if not isinstance(nodes, list):
            if nodes is not None:
                errors.add(f"spec.pipelines[{index}].nodes", _("A list is required."))
            continue
        node_names = {n.get("name") for n in nodes if isinstance(n, dict)}
        for position, node in enumerate(nodes):
            where = f"spec.pipelines[{index}].nodes[{position}]"
            if not isinstance(node, dict):
                errors.add(where, _("A mapping is required."))
                continue
            if not node.get("name"):
                errors.add(f"{where}.name", _("This field is required."))
            template = node.get("template")
            slug = template.partition("@")[0] if isinstance(template, str) else None
            if not slug:
                errors.add(f"{where}.template", _("This field is required."))
            elif slug not in own and slug not in builtin and not PLACEHOLDER.search(slug):
                errors.add(
                    f"{where}.template",
                    _("No template “%(slug)s” in the bundle or among the built-in templates.") % {"slug": slug},
                )
            for dep in node.get("depends_on", []) or []:
                if dep not in node_names:
                    errors.add(f"{where}.depends_on", _("No node “%(name)s” in this pipeline.") % {"name": dep})


def _check_services(spec: dict[str, Any], errors: FieldErrors, names: dict[str, set[str]]) -> None:
    for index, service in enumerate(spec.get("services") or []):
        model = service.get("model") if isinstance(service, dict) else None
        if isinstance(service, dict) and not model and service.get("framework") != "llm":
            errors.add(f"spec.services[{index}].model", _("This field is required (unless the framework is llm)."))
        if isinstance(model, str) and model not in names.get("models", set()) and not PLACEHOLDER.search(model):
            errors.add(f"spec.services[{index}].model", _("Names nothing in spec.models."))


def _check_knowledge_bases(spec: dict[str, Any], errors: FieldErrors, names: dict[str, set[str]]) -> None:
    for index, kb in enumerate(spec.get("knowledge_bases") or []):
        if not isinstance(kb, dict):
            continue
        where = f"spec.knowledge_bases[{index}]"
        for key in sorted(set(kb) - {"name", "description", "files", "strip", "dataset", "tags", "service"}):
            errors.add(f"{where}.{key}", _("Unknown field."))
        if not kb.get("files") and not kb.get("dataset"):
            errors.add(f"{where}.files", _("Give the documents: files of the bundle, a dataset, or both."))
        for key in ("name", "description", "strip", "dataset", "service"):
            if key in kb and not isinstance(kb[key], str):
                errors.add(f"{where}.{key}", _("Must be a string."))
        tags = kb.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
            errors.add(f"{where}.tags", _("Must be a list of words."))
        service = kb.get("service")
        own = {s.get("name"): s for s in spec.get("services") or [] if isinstance(s, dict)}
        if isinstance(service, str) and service in own and own[service].get("framework") != "llm":
            errors.add(f"{where}.service", _("This service does not serve a chat model (framework llm)."))


# --- Parameters -----------------------------------------------------------------------------------------------


def parameter_schema(manifest: dict[str, Any], install: str) -> dict[str, Any]:
    """The parameter schema with `{{ install }}` in its defaults replaced (the form's initial values)."""
    schema = manifest.get("spec", {}).get("parameters") or {}
    return substitute(schema, {"install": install, "params": {}}, "spec.parameters")


def clean_parameters(manifest: dict[str, Any], install: str, values: Any) -> dict[str, Any]:
    """The parameter values with defaults filled in, checked against the schema (errors `parameters.<name>`)."""
    schema = parameter_schema(manifest, install)
    if not schema:
        return {}
    return validate_args(schema, values or {}, "parameters")


def substitute(value: Any, context: dict[str, Any], where: str = "spec") -> Any:
    """`value` with `{{ install }}` and `{{ params.x }}` filled in from `context`, recursively."""
    if isinstance(value, dict):
        return {k: substitute(v, context, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, context, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str) or "{{" not in value:
        return value

    def lookup(match: re.Match) -> Any:
        if match.group(1) == "install":
            return context["install"]
        name = match.group(2)
        if name not in context["params"]:
            raise ValidationError({where: [_("No parameter “%(name)s”.") % {"name": name}]})
        return context["params"][name]

    whole = PLACEHOLDER.fullmatch(value.strip())
    if whole:
        return lookup(whole)
    return PLACEHOLDER.sub(lambda m: str(lookup(m)), value)
