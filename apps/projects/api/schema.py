"""drf-spectacular post-processing: the schema says what the serializers enforce."""

from __future__ import annotations

from typing import Any


def forbid_unknown_fields(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Request bodies refuse keys that are no field (`StrictFieldsMixin`): their components say
    `additionalProperties: false`, so clients and fuzzers generate only what is accepted."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object" and "properties" in component:
            component.setdefault("additionalProperties", False)
    return result
