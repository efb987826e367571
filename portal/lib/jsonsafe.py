"""JSON of data that may hold NaN or ±Infinity floats (metric values: MLflow accepts them).

JSON has no such numbers: `json.dumps` writes the bare tokens `NaN`/`Infinity` (which `JSON.parse` and most
clients reject) or, with `allow_nan=False`, raises, which made every API response holding one a 500. Here they
go out as the strings "NaN", "Infinity" and "-Infinity": what protobuf JSON (and so MLflow) writes for doubles,
and what JavaScript's `Number()` and Python's `float()` read back.

The common case stays on the C encoder: data is only walked when a first, strict encoding found a non-finite
float.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rest_framework import renderers


def finite_float(value: float) -> float | str:
    """`value`, or its protobuf JSON string when it is not a finite number."""
    if math.isfinite(value):
        return value
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def finite(data: Any) -> Any:
    """`data` with every non-finite float (in dicts, lists and tuples, at any depth) replaced by its string."""
    if isinstance(data, float):
        return finite_float(data)
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    return data


def dumps(data: Any, **kwargs: Any) -> str:
    """`json.dumps` that never writes a bare NaN/Infinity token and never fails on one."""
    kwargs["allow_nan"] = False
    try:
        return json.dumps(data, **kwargs)
    except ValueError:  # a non-finite float somewhere (the only ValueError of plain data)
        return json.dumps(finite(data), **kwargs)


class JSONRenderer(renderers.JSONRenderer):
    """DRF's renderer (strict: no bare NaN/Infinity), writing non-finite floats as strings instead of failing."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except ValueError:
            return super().render(finite(data), accepted_media_type, renderer_context)
