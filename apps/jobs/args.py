"""Job template arguments: the JSON Schema a template declares, the values a node gives, and the command line.

A template's `args_schema` is a JSON Schema (Draft 2020-12) object whose properties carry an
`x-portal-type` (str, text, int, float, bool, enum, json, dataset, model, secret) telling forms which widget
to show. Values arrive as JSON, so nothing is coerced; errors come back per field as
`ValidationError({"<prefix>.<arg>": [...]})`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from jsonschema.exceptions import ValidationError as SchemaValidationError

from portal.lib import schemas

# x-portal-type → the JSON type it must hold (None: any; enum and json are constrained otherwise).
PORTAL_TYPES: dict[str, str | None] = {
    "str": "string",
    "text": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "enum": None,
    "json": None,
    "dataset": "string",
    "model": "string",
    "secret": "string",
}
# A property without x-portal-type gets one from its JSON type.
_JSON_TO_PORTAL = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "object": "json",
    "array": "json",
}
# An int is a fine float, so a float property may also say "integer".
_COMPATIBLE_TYPES = {"number": {"number", "integer"}}
# Names become `--name` flags, so they must look like flags.
_ARG_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_TYPE_WORDS = {
    "string": gettext_noop("a string"),
    "integer": gettext_noop("a whole number"),
    "number": gettext_noop("a number"),
    "boolean": gettext_noop("true or false"),
    "object": gettext_noop("a mapping"),
    "array": gettext_noop("a list"),
    "null": gettext_noop("null"),
}


class FieldErrors:
    """Messages per field key, collected so that a caller reports every problem at once."""

    def __init__(self) -> None:
        self.messages: dict[str, list[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.messages)

    def __contains__(self, key: str) -> bool:
        return key in self.messages

    def add(self, key: str, message: str) -> None:
        bucket = self.messages.setdefault(key, [])
        if message not in bucket:
            bucket.append(message)

    def merge(self, error: ValidationError) -> None:
        for key, messages in error.message_dict.items():
            for message in messages:
                self.add(key, message)

    def raise_if_any(self) -> None:
        if self.messages:
            raise ValidationError(self.messages)


def portal_type(prop: dict[str, Any]) -> str:
    """The x-portal-type of a property, derived from its JSON type or enum when the schema does not say."""
    declared = prop.get("x-portal-type")
    if isinstance(declared, str) and declared in PORTAL_TYPES:
        return declared
    if "enum" in prop:
        return "enum"
    return _JSON_TO_PORTAL.get(_first_type(prop.get("type")) or "", "json")


ORDER_KEY = "x-portal-order"


def with_order(schema: dict[str, Any]) -> dict[str, Any]:
    """Record the properties' order in the schema itself: PostgreSQL's jsonb does not keep key order,
    and forms and command lines should follow the order the template's author wrote."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict) or ORDER_KEY in schema:
        return schema
    return {**schema, ORDER_KEY: list(schema["properties"])}


def ordered_properties(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema's properties in the author's order (see `with_order`), unknown ones after."""
    properties: dict[str, Any] = schema.get("properties") or {}
    order = [name for name in schema.get(ORDER_KEY) or [] if name in properties]
    return {name: properties[name] for name in [*order, *(n for n in properties if n not in order)]}


def validate_args_schema(schema: Any) -> None:
    """Check a template's argument schema: valid Draft 2020-12, an object of typed, flag-like properties.

    An empty schema means "no arguments". References must stay inside the schema and patterns must be RE2's
    (see `portal.lib.schemas`). Raises `ValidationError({"args_schema": [...]})`.
    """
    if schema in (None, {}):
        return
    problems: list[str] = []
    if not isinstance(schema, dict):
        raise ValidationError({"args_schema": [_("The argument schema must be a JSON object.")]})
    for where, message in schemas.schema_problems(schema):
        problems.append(_("%(where)s: %(message)s") % {"where": where, "message": message})
    if problems:  # the checks below assume a structurally valid schema
        raise ValidationError({"args_schema": problems})

    if schema.get("type", "object") != "object":
        problems.append(_("The argument schema must have “type”: “object”."))
    properties = schema.get("properties", {})
    for name, prop in properties.items():
        problems.extend(_property_problems(name, prop))
    for name in schema.get("required", []):
        if name not in properties:
            problems.append(_("“%(name)s” is required but not among the properties.") % {"name": name})
    if problems:
        raise ValidationError({"args_schema": problems})


def _property_problems(name: str, prop: Any) -> list[str]:
    if not _ARG_NAME_RE.match(name):
        return [_("“%(name)s”: argument names must be letters, digits, “_” or “-”.") % {"name": name}]
    if not isinstance(prop, dict):
        return [_("“%(name)s”: the property must be a JSON object.") % {"name": name}]
    problems: list[str] = []
    declared = prop.get("x-portal-type")
    json_type = _first_type(prop.get("type"))
    if declared is not None:
        if declared not in PORTAL_TYPES:
            choices = ", ".join(PORTAL_TYPES)
            return [
                _("“%(name)s”: unknown x-portal-type “%(type)s” (use one of %(choices)s).")
                % {"name": name, "type": declared, "choices": choices}
            ]
        expected = PORTAL_TYPES[declared]
        if expected and json_type and json_type not in _COMPATIBLE_TYPES.get(expected, {expected}):
            problems.append(
                _("“%(name)s”: x-portal-type “%(portal)s” does not fit “type”: “%(type)s”.")
                % {"name": name, "portal": declared, "type": json_type}
            )
        if declared == "enum" and not prop.get("enum"):
            problems.append(_("“%(name)s”: an enum needs a non-empty “enum” list.") % {"name": name})
    elif "enum" not in prop and json_type not in _JSON_TO_PORTAL:
        problems.append(_("“%(name)s”: give an x-portal-type or a JSON “type”.") % {"name": name})
    if not problems and "default" in prop:
        for error in schemas.validator(_effective_property(prop)).iter_errors(prop["default"]):
            problems.append(
                _("“%(name)s”: the default is invalid: %(message)s") % {"name": name, "message": _describe(error)}
            )
    return problems


def validate_args(schema: dict[str, Any] | None, args: Any, prefix: str) -> dict[str, Any]:
    """The node's arguments with defaults filled in, in the schema's property order.

    Errors are keyed `f"{prefix}.{arg}"` (the bare prefix when `args` is not a mapping). A null value counts
    as not given: the command line could not carry it anyway. Arguments the schema does not declare are
    rejected unless the schema explicitly allows additional properties. A schema saved before the checks of
    `validate_args_schema` existed is checked again here, so that it is never applied unchecked.
    """
    if schema and schemas.schema_problems(schema):
        message = _("The template's argument schema is invalid; fix the template.")
        raise ValidationError({"args_schema": [message]})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValidationError({prefix: [_("Arguments must be a mapping of name to value.")]})
    schema = schema or {}
    properties = ordered_properties(schema)
    given = {name: value for name, value in args.items() if value is not None}
    filled: dict[str, Any] = {}
    for name, prop in properties.items():
        if name in given:
            filled[name] = given[name]
        elif isinstance(prop, dict) and "default" in prop and prop["default"] is not None:
            filled[name] = copy.deepcopy(prop["default"])
    filled.update((name, value) for name, value in given.items() if name not in properties)

    errors = FieldErrors()
    for error in schemas.validator(_effective_schema(schema)).iter_errors(filled):
        for field, message in _field_messages(error):
            errors.add(f"{prefix}.{field}" if field else prefix, message)
    errors.raise_if_any()
    return filled


def to_cli_args(schema: dict[str, Any] | None, args: dict[str, Any]) -> list[str]:
    """Arguments as Cube Studio-style flags: `--name value`, a bare `--name` for true, JSON for lists and maps.

    False, null and "" are left out. Order follows the schema's properties, then any extra arguments.
    """
    properties = ordered_properties(schema or {})
    names = [name for name in properties if name in args] + [name for name in args if name not in properties]
    argv: list[str] = []
    for name in names:
        value = args[name]
        prop = properties.get(name)
        as_json = isinstance(prop, dict) and portal_type(prop) == "json"
        if value is None or value == "" or (value is False and not as_json):
            continue
        if value is True and not as_json:
            argv.append(f"--{name}")
        elif as_json or isinstance(value, dict | list):
            argv.extend([f"--{name}", json.dumps(value, separators=(",", ":"), ensure_ascii=False)])
        else:
            argv.extend([f"--{name}", str(value)])
    return argv


def _first_type(value: Any) -> str | None:
    """The JSON type a property holds, ignoring "null" in a list of types."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return next((item for item in value if item != "null"), None)
    return None


def _effective_property(prop: dict[str, Any]) -> dict[str, Any]:
    """The property as the validator should see it: the JSON type implied by x-portal-type made explicit."""
    expected = PORTAL_TYPES.get(prop.get("x-portal-type", ""))
    if expected and "type" not in prop:
        return {**prop, "type": expected}
    return prop


def _effective_schema(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties", {})
    return {
        **schema,
        "type": "object",
        "properties": {
            name: _effective_property(prop) if isinstance(prop, dict) else prop for name, prop in properties.items()
        },
        # Undeclared arguments would reach the program as flags it does not know, so they are opt-in.
        "additionalProperties": schema.get("additionalProperties", False),
    }


def _field_messages(error: SchemaValidationError) -> Iterable[tuple[str, str]]:
    """(argument name, message) pairs for one jsonschema error; the name is "" for the arguments as a whole."""
    path = [str(part) for part in error.absolute_path]
    field, inner = (path[0], path[1:]) if path else ("", [])
    if error.validator == "required" and isinstance(error.instance, dict):
        for name in error.validator_value:
            if name not in error.instance:
                yield _located(field, [*inner, name], _("required"))
    elif error.validator == "additionalProperties" and error.validator_value is False:
        known = error.schema.get("properties", {})
        patterns = [schemas.compile_pattern(p) for p in error.schema.get("patternProperties", {})]
        for name in error.instance:
            if name not in known and not any(p.search(name) for p in patterns):
                yield _located(field, [*inner, name], _("unknown argument") if not path else _("unknown key"))
    else:
        yield _located(field, inner, _describe(error))


def _located(field: str, inner: list[str], message: str) -> tuple[str, str]:
    """At the top level the name is the field; deeper (inside a json argument) the path leads the message."""
    if not field:
        return (inner[0], message) if inner else ("", message)
    if inner:
        return field, f"{'.'.join(inner)}: {message}"
    return field, message


def _describe(error: SchemaValidationError) -> str:
    """A message a person reads next to the field, instead of jsonschema's Python-flavoured one."""
    value, limit = error.instance, error.validator_value
    shown = _show(value)
    match error.validator:
        case "type":
            types = [limit] if isinstance(limit, str) else list(limit)
            wanted = _(" or ").join(_(_TYPE_WORDS.get(t, t)) for t in types)
            return _("%(value)s is not %(wanted)s") % {"value": shown, "wanted": wanted}
        case "enum":
            choices = ", ".join(_show(choice) for choice in limit)
            return _("%(value)s is not one of: %(choices)s") % {"value": shown, "choices": choices}
        case "const":
            return _("must be %(value)s") % {"value": _show(limit)}
        case "minimum":
            return _("must be at least %(limit)s") % {"limit": limit}
        case "maximum":
            return _("must be at most %(limit)s") % {"limit": limit}
        case "exclusiveMinimum":
            return _("must be greater than %(limit)s") % {"limit": limit}
        case "exclusiveMaximum":
            return _("must be less than %(limit)s") % {"limit": limit}
        case "minLength":
            return _("must be at least %(limit)s characters long") % {"limit": limit}
        case "maxLength":
            return _("must be at most %(limit)s characters long") % {"limit": limit}
        case "pattern":
            return _("%(value)s does not match the pattern %(pattern)s") % {"value": shown, "pattern": limit}
        case "minItems":
            return _("needs at least %(limit)s items") % {"limit": limit}
        case "maxItems":
            return _("takes at most %(limit)s items") % {"limit": limit}
        case _:
            return error.message


def _show(value: Any) -> str:
    """Plain text as itself (0.2x), anything else, or text that would read ambiguously, as JSON ("", true)."""
    if isinstance(value, str) and value and value == value.strip() and len(value) <= 60:
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else f"{text[:57]}…"
