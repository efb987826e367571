"""JSON Schema written by users (job templates' `args_schema`), checked and applied without I/O or backtracking.

Two attacks a user-written schema allows with jsonschema's defaults, and what closes each:

- **SSRF with reflection.** With no registry, jsonschema retrieves any `$ref` it cannot resolve locally over HTTP,
  at every validation, and the fetched document's values come back in its error messages. `local_ref_problems`
  refuses a `$ref`/`$dynamicRef` that does not point inside the schema itself, and `validator()` resolves
  references through `REGISTRY`, which holds the JSON Schema meta-schemas only and retrieves nothing.
- **ReDoS.** jsonschema runs `pattern`, `patternProperties` (and the `additionalProperties` that depends on them)
  with Python's backtracking `re`: `^(a+)+$` doubles its time per character of input. Here every user pattern is
  compiled and run by RE2, whose time is linear in the input; a pattern RE2 cannot compile (back-references,
  look-around) is refused when the schema is checked, with the meta-schema's `format: regex` backed by RE2 too.
  `unevaluatedProperties` next to `patternProperties` is refused: jsonschema evaluates that pair with `re`, and
  no argument schema needs it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import re2
from django.utils.translation import get_language
from django.utils.translation import gettext as _
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry
from referencing.exceptions import NoSuchResource

REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


def _retrieve_nothing(uri: str) -> Any:
    raise NoSuchResource(ref=uri)


# The meta-schemas (so that a `$schema` or a `$ref` to them still resolves), and nothing that needs fetching.
REGISTRY: Registry = SPECIFICATIONS.combine(Registry(retrieve=_retrieve_nothing))


class PatternError(ValueError):
    """A regular expression RE2 cannot compile."""


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> re2._Regexp:
    """`pattern` compiled by RE2 (cached: a schema's patterns are applied to every node's arguments)."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused pattern to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise PatternError(str(exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc)) from None


def _is_linear_regex(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        compile_pattern(instance)
    except PatternError:
        return False
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    checker.checkers["regex"] = (_is_linear_regex, ())
    return checker


FORMAT_CHECKER = _format_checker()


def _matches(pattern: str, text: str) -> bool:
    try:
        return compile_pattern(pattern).search(text) is not None
    except PatternError:
        return False  # refused when the schema is checked; an unchecked one cannot fall back to `re`


def _pattern(validator: Validator, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Validator, patterns: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_matches(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            listed = ", ".join(repr(extra) for extra in sorted(extras, key=str))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {', '.join(map(repr, patterns))}")
        else:
            noun = "was" if len(extras) == 1 else "were"
            listed = ", ".join(repr(extra) for extra in extras)
            yield ValidationError(f"Additional properties are not allowed ({listed} {noun} unexpected)")


SafeValidator = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties},
)


def validator(schema: dict[str, Any] | bool) -> Validator:
    """A Draft 2020-12 validator for a checked user schema: RE2 patterns, no reference retrieval."""
    return SafeValidator(schema, registry=REGISTRY)


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, str(index)))


# schema_problems' answers by the schema's JSON and the language of their messages: every run's start checks each
# node's template schema (twice), and a study's pass starts many runs of one template; the check costs ≈ 0.6 ms.
_CHECKED: dict[tuple[str, str | None], tuple[tuple[str, str], ...]] = {}
_CHECKED_MAX = 256


def schema_problems(schema: Any) -> list[tuple[str, str]]:
    """(where, message) for each reason to refuse `schema`: not valid Draft 2020-12 (RE2 deciding what a regex
    is), a reference outside the schema, or `unevaluatedProperties` next to `patternProperties`."""
    try:
        key = (json.dumps(schema), get_language())
    except (TypeError, ValueError):  # not JSON (no schema stored or sent is): checked every time
        return _schema_problems(schema)
    problems = _CHECKED.get(key)
    if problems is None:
        problems = tuple(_schema_problems(schema))
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = problems
    return list(problems)


def _schema_problems(schema: Any) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=FORMAT_CHECKER, registry=REGISTRY)
    for error in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path]):
        message = error.message
        if error.validator == "format" and error.validator_value == "regex":
            message = _("%(pattern)r is not a regular expression the portal can run in linear time (RE2)") % {
                "pattern": error.instance
            }
        problems.append((".".join(map(str, error.absolute_path)) or "schema", message))
    has_patterns = has_unevaluated = False
    for path, node in _walk(schema):
        for keyword in REFERENCE_KEYWORDS:
            ref = node.get(keyword)
            if isinstance(ref, str) and not ref.startswith("#"):
                where = ".".join((*path, keyword))
                message = _("%(ref)r is not a reference inside the schema: only “#…” references are allowed")
                problems.append((where, message % {"ref": ref}))
        has_patterns = has_patterns or isinstance(node.get("patternProperties"), dict)
        has_unevaluated = has_unevaluated or "unevaluatedProperties" in node
    if has_patterns and has_unevaluated:
        problems.append(("schema", _("“unevaluatedProperties” cannot be combined with “patternProperties”.")))
    return problems
