"""Hygiene of untrusted input, shared by every door: the DRF API, the MLflow API, YAML imports and query strings.

What a request may hold that no column, no JSON document and no Python stack can take, refused with a 400 that names
the field rather than met later as a 500:

- a NUL (U+0000): PostgreSQL's text and jsonb cannot store it (the driver raises), and file paths cannot hold it;
- a lone surrogate (U+D800–U+DFFF, e.g. a JSON `"\\ud800"`): no UTF-8 encoding exists, so the driver fails to encode
  it (SQLite as well as PostgreSQL), and so do the log lines and files it would reach;
- nesting deeper than `MAX_DEPTH` containers: the JSON decoder, YAML's composer, `copy.deepcopy` and every walker of
  a spec recurse, and `[` × 50,000 ends in a RecursionError.

Byte size is the request-size limits' business (settings), not this module's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from django.core.validators import MaxValueValidator, MinValueValidator
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.settings import api_settings
from rest_framework.utils.formatting import lazy_format

from portal.lib import bodylimit

# Containers inside containers. A pipeline spec is about six deep (body → spec → nodes → node → args → value); a
# template's argument schema some more. A hundred leaves room for any honest document and none for a recursion bomb.
MAX_DEPTH = 100

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


class UnsafeInput(ValueError):
    """Input no door takes; `path` names where it is ("spec.nodes.0.args.x", "" for the whole body)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message

    @property
    def field(self) -> str:
        """The top-level field the problem is in (what a 400 keys its message by)."""
        return self.path.split(".", 1)[0]

    @property
    def detail(self) -> str:
        """The message, with the place inside the field when it is deeper than the field itself."""
        inner = self.path.partition(".")[2]
        return f"{inner}: {self.message}" if inner else self.message


def text_problem(text: str) -> str | None:
    """Why `text` cannot be taken (a NUL or a lone surrogate in it), or None."""
    match = _BAD_TEXT.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return _("Text may not contain NUL (\\u0000) characters.")
    return _("Text may not contain lone surrogates (\\ud800–\\udfff): they are not Unicode characters.")


def depth_message() -> str:
    return _("Nested deeper than %(max)s levels.") % {"max": MAX_DEPTH}


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _items(value: Any) -> Iterator[tuple[Any, Any]]:
    if hasattr(value, "lists"):  # a QueryDict: every value of a repeated key, not only the last
        for key, values in value.lists():
            for item in values:
                yield key, item
    else:
        yield from value.items()


def check(data: Any, path: str = "") -> None:
    """UnsafeInput at the first NUL, lone surrogate (in keys and values) or level past `MAX_DEPTH` in `data`.

    Walks with a stack of its own, so data nested deeper than Python's recursion limit is refused, not a crash."""
    stack: list[tuple[Any, str, int]] = [(data, path, 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                raise UnsafeInput(where, problem)
        elif isinstance(value, Mapping):
            if depth >= MAX_DEPTH:
                raise UnsafeInput(where, depth_message())
            children = []
            for key, item in _items(value):
                if isinstance(key, str):
                    problem = text_problem(key)
                    if problem:
                        raise UnsafeInput(where, problem)
                children.append((item, _join(where, key), depth + 1))
            stack.extend(reversed(children))  # first key first: the error names what a reader meets first
        elif isinstance(value, list | tuple):
            if depth >= MAX_DEPTH:
                raise UnsafeInput(where, depth_message())
            stack.extend((item, _join(where, i), depth + 1) for i, item in reversed(list(enumerate(value))))


def _clean(value: Any, depth: int = 0) -> bool:
    """Whether `check` would pass decoded JSON (dicts, lists, strings, numbers): the same tests without building a
    path for every value (a 1,000-metric log-batch has ~10,000 of them). Recursion stays under MAX_DEPTH."""
    kind = type(value)
    if kind is str:
        return _BAD_TEXT.search(value) is None
    if kind is dict:
        if depth >= MAX_DEPTH:
            return False
        search = _BAD_TEXT.search
        for key, item in value.items():
            if type(key) is not str or search(key) is not None:
                return False
            if type(item) is not str or search(item) is not None:
                if type(item) in _SCALARS:
                    continue
                if not _clean(item, depth + 1):
                    return False
        return True
    if kind is list:
        if depth >= MAX_DEPTH:
            return False
        return all(type(item) in _SCALARS or _clean(item, depth + 1) for item in value)
    return kind in _SCALARS


_SCALARS = frozenset({int, float, bool, type(None)})


def loads(text: str | bytes) -> Any:
    """`json.loads` of an untrusted document, then `check`ed: ValueError for what is not JSON, UnsafeInput (also a
    ValueError) for what no door takes, never a RecursionError."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise UnsafeInput("", depth_message()) from None
    if not _clean(data):
        check(data)  # the walk that names the place of the problem
    return data


def validation_error(exc: UnsafeInput) -> ValidationError:
    """A DRF 400 keyed by the field (non_field_errors for the body itself)."""
    return ValidationError({exc.field or api_settings.NON_FIELD_ERRORS_KEY: [exc.detail]})


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting past `MAX_DEPTH` with a ComposerError (a YAMLError, with its line and
    column, like any syntax error): the composer recurses once per level, so `[` × 50,000 was a RecursionError."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, depth_message(), self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class JSONParser(bodylimit.JSONParser):
    """DRF's JSON parser held to the body limit (portal.lib.bodylimit), refusing what `check` refuses with a 400
    naming the field, and a document nested past the decoder's recursion limit with a 400 rather than a
    RecursionError (a 500)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(depth_message()) from None
        try:
            check(data)
        except UnsafeInput as exc:
            raise validation_error(exc) from None
        return data


class RequestLineMiddleware:
    """Refuses a path or a query string holding a NUL (`?path=%00`, `/logged-models/m%00/`) before any view: it
    would reach a database filter (a 500 on PostgreSQL) or a file path. Surrogates cannot come this way (Django
    decodes both with replacement). The MLflow API answers in its own error shape; the rest of /api/ with DRF's
    field errors."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            check(request.path_info, "url")
            check(request.GET)
        except UnsafeInput as exc:
            return self.refusal(request, exc)
        return self.get_response(request)

    @staticmethod
    def refusal(request: HttpRequest, exc: UnsafeInput) -> HttpResponse:
        path = request.path_info
        if re.match(r"^/(ajax-)?api/[23]\.0/mlflow", path):
            return JsonResponse({"error_code": "INVALID_PARAMETER_VALUE", "message": str(exc)}, status=400)
        if path.startswith("/api/"):
            return JsonResponse({exc.field: [exc.detail]}, status=400)
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")


# --- Numbers -------------------------------------------------------------------------------------------------------

INT64 = (-(2**63), 2**63 - 1)


def finite_number(value: float) -> None:
    """A validator: NaN and ±Infinity are no amount of anything (and compare false with every bound)."""
    if not math.isfinite(value):
        raise ValidationError(_("Must be a finite number (not NaN or Infinity)."))


def bound_number_field(field: serializers.Field, column: tuple[int | None, int | None] | None = None) -> None:
    """Give an IntegerField without bounds those of the column it fills (`column`, default 64 bits), and make every
    FloatField refuse NaN and ±Infinity, in `field` and the children of list and dict fields: a number past its
    column is a 400 naming the field, not a database overflow (a 500)."""
    if isinstance(field, serializers.ListField | serializers.DictField):
        bound_number_field(field.child)
        return
    if isinstance(field, serializers.FloatField):
        if finite_number not in field.validators:
            field.validators.append(finite_number)
        return
    if not isinstance(field, serializers.IntegerField):
        return
    low, high = column or INT64
    low = INT64[0] if low is None else max(low, INT64[0])
    high = INT64[1] if high is None else min(high, INT64[1])
    if field.max_value is None or field.max_value > high:
        field.max_value = high
        message = lazy_format(field.error_messages["max_value"], max_value=high)
        field.validators.append(MaxValueValidator(high, message=message))
    if field.min_value is None or field.min_value < low:
        field.min_value = low
        message = lazy_format(field.error_messages["min_value"], min_value=low)
        field.validators.append(MinValueValidator(low, message=message))
