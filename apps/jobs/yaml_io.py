"""Pipelines as YAML files: what users export, keep in git and import again.

    apiVersion: portal/v1
    kind: Pipeline
    metadata: {name: ..., description: ...}
    spec: {...}            # validated separately by apps.jobs.dag.validate_spec

Loading checks the envelope only; the spec needs templates and limits, which `validate_spec` brings.
"""

from __future__ import annotations

from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.utils.translation import gettext as _

from apps.jobs.args import FieldErrors
from portal.lib import untrusted

API_VERSION = "portal/v1"
KIND = "Pipeline"
MAX_YAML_CHARS = 1_000_000
MAX_NAME_LENGTH = 100  # Pipeline.name


class _Dumper(yaml.SafeDumper):
    """Block style, indented lists, multi-line text as `|` blocks, and no anchors: the loader refuses aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key, as people (and most YAML in the wild) write them.
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None  # the emitter falls back to quotes where a block cannot hold it
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


class _Loader(untrusted.YamlLoader):
    """Safe loading without aliases (a few nested aliases expand to gigabytes once the spec is stored as JSON), and
    without nesting past `untrusted.MAX_DEPTH` (`[` × 50,000 was a RecursionError, a 500)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (*name) are not supported", event.start_mark
            )
        return super().compose_node(parent, index)


def dump_pipeline(name: str, description: str, spec: dict[str, Any]) -> str:
    """The pipeline as a portal/v1 YAML document, keys in the order written."""
    document = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "description": description},
        "spec": spec,
    }
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def load_pipeline(text: str) -> tuple[str, str, dict[str, Any]]:
    """(name, description, spec) from a portal/v1 YAML document.

    ValidationError: {"yaml": ["line 3, column 5: ..."]} for text that is not YAML, otherwise keyed by the
    field that is wrong ("apiVersion", "kind", "metadata.name", "spec", ...).
    """
    if len(text) > MAX_YAML_CHARS:
        raise ValidationError(
            {"yaml": [_("The file is too large (at most %(max)s characters).") % {"max": MAX_YAML_CHARS}]}
        )
    try:
        document = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        raise ValidationError({"yaml": [_syntax_message(exc)]}) from None
    except yaml.YAMLError as exc:
        raise ValidationError({"yaml": [str(exc)]}) from None
    except RecursionError:  # constructing is recursive too; the composer's limit is meant to come first
        raise ValidationError({"yaml": [untrusted.depth_message()]}) from None
    try:  # "\0" and "\ud800" are valid YAML escapes, and no column takes what they make
        untrusted.check(document)
    except untrusted.UnsafeInput as exc:
        raise ValidationError({exc.path or "yaml": [exc.message]}) from None
    if document is None:
        raise ValidationError({"yaml": [_("The file is empty.")]})
    if not isinstance(document, dict):
        raise ValidationError({"yaml": [_("Expected a mapping with apiVersion, kind, metadata and spec.")]})

    errors = FieldErrors()
    for key in document:
        if key not in {"apiVersion", "kind", "metadata", "spec"}:
            errors.add(str(key), _("Unknown field."))
    if document.get("apiVersion") != API_VERSION:
        errors.add("apiVersion", _("Must be %(expected)s.") % {"expected": API_VERSION})
    if document.get("kind") != KIND:
        errors.add("kind", _("Must be %(expected)s.") % {"expected": KIND})

    metadata = document.get("metadata")
    name: Any = None
    description: Any = ""
    if not isinstance(metadata, dict):
        errors.add("metadata", _("Must be a mapping with a name."))
    else:
        for key in metadata:
            if key not in {"name", "description"}:
                errors.add(f"metadata.{key}", _("Unknown field."))
        name = metadata.get("name")
        description = metadata.get("description")
        description = "" if description is None else description
        _check_name(name, errors)
        if not isinstance(description, str):
            errors.add("metadata.description", _("Must be text."))

    spec = document.get("spec")
    if spec is None:
        errors.add("spec", _("Required."))
    elif not isinstance(spec, dict):
        errors.add("spec", _("Must be a mapping."))
    errors.raise_if_any()
    return name, description, spec


def _check_name(name: Any, errors: FieldErrors) -> None:
    if name is None or name == "":
        errors.add("metadata.name", _("Required."))
        return
    if not isinstance(name, str):
        errors.add("metadata.name", _("Must be text."))
        return
    if len(name) > MAX_NAME_LENGTH:
        errors.add("metadata.name", _("At most %(max)s characters.") % {"max": MAX_NAME_LENGTH})
    try:
        validate_slug(name)
    except ValidationError as exc:
        for message in exc.messages:
            errors.add("metadata.name", message)


def _syntax_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or str(exc)
    if mark is None:
        return problem
    return _("line %(line)s, column %(column)s: %(problem)s") % {
        "line": mark.line + 1,
        "column": mark.column + 1,
        "problem": problem,
    }
