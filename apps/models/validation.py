"""MLflow's limits and name rules (mlflow/utils/validation.py), with its messages, so clients see the same."""

from __future__ import annotations

import math
import posixpath
import re
from typing import Any

from apps.models.errors import InvalidParameter

MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000
MAX_BATCH_LOG_REQUEST_SIZE = int(1e6)
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_EXPERIMENT_NAME_LENGTH = 500
MAX_EXPERIMENT_TAG_VAL_LENGTH = 20000
MAX_ENTITY_KEY_LENGTH = 250
MAX_MODEL_REGISTRY_TAG_VALUE_LENGTH = 100_000
MAX_REGISTERED_MODEL_ALIAS_LENGTH = 255
MAX_DATASET_NAME_SIZE = 500
MAX_DATASET_DIGEST_SIZE = 36
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_NAME_RE = re.compile(r"^[/\w.\- :]*$")
_RUN_ID_RE = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")
_ALIAS_RE = re.compile(r"^[\w\-]*$")
_ALIAS_VERSION_RE = re.compile(r"^[vV]\d+$")
_BAD_CHARS = (
    "Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), colon(:) "
    "and slashes (/)."
)


def invalid_value(path: str, value: Any, message: str | None = None) -> str:
    text = f"Invalid value {value!r} for parameter '{path}' supplied"
    return f"{text}: {message}" if message else f"{text}."


def validate_name(name: Any, path: str, what: str = "Metric") -> str:
    """Metric, param and tag keys: MLflow's characters, no path tricks, at most 250 characters."""
    if name is None or name == "":
        raise InvalidParameter(invalid_value(path, name, f"{what} name cannot be None. A key name must be provided."))
    if not isinstance(name, str):
        raise InvalidParameter(invalid_value(path, name))
    if not _NAME_RE.match(name):
        raise InvalidParameter(invalid_value(path, name, _BAD_CHARS))
    norm = posixpath.normpath(name)
    if norm != name or norm == "." or norm.startswith("..") or norm.startswith("/"):
        raise InvalidParameter(
            invalid_value(
                path,
                name,
                "Names may be treated as files in certain cases, and must not resolve to other names when "
                f"treated as such. This name would resolve to {norm!r}",
            )
        )
    check_length(f"{what.lower()} key", MAX_ENTITY_KEY_LENGTH, name)
    return name


def missing_value(path: str) -> str:
    return (
        f"Missing value for required parameter '{path}'. See the API docs for more information about request "
        "parameters."
    )


def check_length(entity: str, limit: int, value: str | None) -> None:
    if value is not None and len(value) > limit:
        raise InvalidParameter(f"'{entity}' exceeds the maximum length of {limit} characters")


def as_string(
    value: Any, path: str, *, required: bool = False, default: str = "", max_length: int | None = None
) -> str:
    """`value` as text; `max_length`: the column's, so that a longer value is refused rather than a 500."""
    if value is None:
        if required:
            raise InvalidParameter(missing_value(path))
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidParameter(invalid_value(path, value))
    text = str(value)
    if max_length is not None:
        check_length(path, max_length, text)
    return text


def as_int(value: Any, path: str, *, default: int | None = None, required: bool = False) -> int | None:
    if value is None or value == "":
        if required:
            raise InvalidParameter(missing_value(path))
        return default
    if isinstance(value, bool):
        raise InvalidParameter(f"Parameter '{path}' must be an integer, got '{value}'.")
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError):
        number = None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        raise InvalidParameter(f"Parameter '{path}' must be an integer, got '{value}'.")
    return number


_FLOAT_WORDS = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf, "inf": math.inf, "-inf": -math.inf}


def as_float(value: Any, path: str) -> float:
    """A metric value: a JSON number, or protobuf-JSON's "NaN" / "Infinity" / "-Infinity"."""
    if isinstance(value, bool) or value is None:
        raise InvalidParameter(invalid_value(path, value, "Got invalid value. Metric values must be numeric."))
    try:
        if isinstance(value, (int, float)):
            return float(value)  # an integer past a double's range (10**400) is an OverflowError
        if isinstance(value, str):
            word = _FLOAT_WORDS.get(value.strip().lower())
            if word is not None:
                return word
            return float(value)
    except (ValueError, OverflowError):
        pass
    raise InvalidParameter(invalid_value(path, value, "Got invalid value. Metric values must be numeric."))


def validate_run_id(run_id: Any, path: str = "run_id") -> str:
    if not isinstance(run_id, str) or not run_id:
        raise InvalidParameter(
            f"Missing value for required parameter '{path}'. See the API docs for more information about request "
            "parameters."
        )
    if not _RUN_ID_RE.match(run_id):
        raise InvalidParameter(invalid_value(path, run_id))
    return run_id


def validate_batch_limits(n_metrics: int, n_params: int, n_tags: int) -> None:
    for entity, limit, length in (
        ("metrics", MAX_METRICS_PER_BATCH, n_metrics),
        ("params", MAX_PARAMS_TAGS_PER_BATCH, n_params),
        ("tags", MAX_PARAMS_TAGS_PER_BATCH, n_tags),
        ("metrics, params, and tags", MAX_ENTITIES_PER_BATCH, n_metrics + n_params + n_tags),
    ):
        if length > limit:
            raise InvalidParameter(
                f"A batch logging request can contain at most {limit} {entity}. Got {length} {entity}. Please split "
                f"up {entity} across multiple requests and try again."
            )


def validate_alias(alias: Any) -> str:
    if not isinstance(alias, str) or not alias:
        raise InvalidParameter("Missing value for required parameter 'alias'.")
    if not _ALIAS_RE.match(alias):
        raise InvalidParameter(
            f"Invalid alias name: '{alias}'. Names may only contain alphanumerics, underscores (_), and dashes (-)."
        )
    if _ALIAS_VERSION_RE.match(alias) or alias.lower() == "latest":
        raise InvalidParameter(f"Invalid alias name: '{alias}'. Alias cannot be 'latest' or of the form 'v<number>'.")
    check_length("alias name", MAX_REGISTERED_MODEL_ALIAS_LENGTH, alias)
    return alias
