"""The search space of a study: validation (errors keyed by field, `space.<param>.<key>`), sampling through an
Optuna trial (conditional parameters included), the grid of a grid search, and `${trial.<param>}` references.

A parameter is one of
    {"type": "int", "low": 1, "high": 9, "step": 2, "log": false}
    {"type": "float", "low": 1e-3, "high": 10, "log": true}          (or "step": 0.5, not both)
    {"type": "categorical", "choices": ["linear", "rbf"]}
and any of them may carry `"condition": {"param": "kernel", "in": ["rbf"]}`: it is sampled only when that
categorical parameter took one of those values (Optuna's define-by-run conditional space).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

from django.utils.translation import gettext as _

from apps.jobs.args import FieldErrors

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
TYPES = ("int", "float", "categorical")
KEYS = {
    "int": {"type", "low", "high", "step", "log", "condition"},
    "float": {"type", "low", "high", "step", "log", "condition"},
    "categorical": {"type", "choices", "condition"},
}
REFERENCE_RE = re.compile(r"\$\{trial\.([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_GRID = 10_000


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def validate_space(space: Any, errors: FieldErrors, key: str = "space") -> dict[str, dict[str, Any]]:
    """The space, normalised (defaults filled in, parents before their conditional children); errors go to `errors`."""
    if not isinstance(space, dict) or not space:
        errors.add(key, _("Give at least one parameter, as a mapping of name to its definition."))
        return {}
    clean: dict[str, dict[str, Any]] = {}
    for name, spec in space.items():
        where = f"{key}.{name}"
        if not isinstance(name, str) or not NAME_RE.match(name):
            errors.add(key, _("“%(name)s” is not a valid parameter name (letters, digits, _).") % {"name": name})
            continue
        if not isinstance(spec, dict):
            errors.add(where, _("Must be a mapping with a “type”."))
            continue
        kind = spec.get("type")
        if kind not in TYPES:
            errors.add(f"{where}.type", _("Must be one of: %(types)s.") % {"types": ", ".join(TYPES)})
            continue
        unknown = sorted(set(spec) - KEYS[kind])
        if unknown:
            errors.add(where, _("Unknown keys: %(keys)s.") % {"keys": ", ".join(map(str, unknown))})
        param = _validate_param(kind, spec, where, errors)
        if param is not None:
            clean[name] = param
    for name, param in clean.items():
        _validate_condition(name, param, clean, f"{key}.{name}.condition", errors)
    return _ordered(clean)


def _validate_param(kind: str, spec: dict[str, Any], where: str, errors: FieldErrors) -> dict[str, Any] | None:
    param: dict[str, Any] = {"type": kind}
    if "condition" in spec:
        param["condition"] = spec["condition"]
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            errors.add(f"{where}.choices", _("Give a non-empty list of choices."))
            return None
        if not all(c is None or isinstance(c, str | bool | int | float) for c in choices):
            errors.add(f"{where}.choices", _("Choices must be text, numbers, true/false or null."))
            return None
        if len({repr(c) for c in choices}) != len(choices):
            errors.add(f"{where}.choices", _("Choices must be distinct."))
            return None
        param["choices"] = choices
        return param
    ok = True
    for bound in ("low", "high"):
        value = spec.get(bound)
        if not _number(value) or (kind == "int" and not (isinstance(value, int) or float(value).is_integer())):
            errors.add(f"{where}.{bound}", _("Must be an integer.") if kind == "int" else _("Must be a number."))
            ok = False
    if not ok:
        return None
    low, high = spec["low"], spec["high"]
    if kind == "int":
        low, high = int(low), int(high)
    if low > high:
        errors.add(f"{where}.high", _("Must be at least low (%(low)s).") % {"low": low})
        return None
    log = spec.get("log", False)
    if not isinstance(log, bool):
        errors.add(f"{where}.log", _("Must be true or false."))
        return None
    step = spec.get("step")
    if step is not None:
        if not _number(step) or step <= 0 or (kind == "int" and not float(step).is_integer()):
            errors.add(f"{where}.step", _("Must be a positive number (an integer for an int parameter)."))
            return None
        if log and (kind == "float" or step != 1):
            errors.add(f"{where}.step", _("A log-scale parameter cannot have a step."))
            return None
    if log and low <= 0:
        errors.add(f"{where}.low", _("A log-scale parameter needs low > 0."))
        return None
    param.update({"low": low, "high": high, "log": log})
    if step is not None:
        param["step"] = int(step) if kind == "int" else step
    return param


def _validate_condition(
    name: str, param: dict[str, Any], clean: dict[str, dict[str, Any]], where: str, errors: FieldErrors
) -> None:
    condition = param.get("condition")
    if condition is None:
        return
    if not isinstance(condition, dict) or set(condition) != {"param", "in"} or not isinstance(condition["in"], list):
        errors.add(where, _("Must be {param: <categorical parameter>, in: [values]}."))
        return
    parent = clean.get(condition["param"])
    if parent is None or parent["type"] != "categorical" or condition["param"] == name:
        errors.add(f"{where}.param", _("Must name another categorical parameter of the space."))
        return
    missing = [v for v in condition["in"] if v not in parent["choices"]]
    if not condition["in"] or missing:
        errors.add(f"{where}.in", _("Must list choices of “%(param)s”.") % {"param": condition["param"]})
        return
    seen = {name}
    while parent is not None and "condition" in parent:  # a chain of conditions must end: no cycle
        ancestor = parent["condition"].get("param") if isinstance(parent["condition"], dict) else None
        if ancestor in seen:
            errors.add(where, _("Conditions form a cycle."))
            return
        seen.add(ancestor)
        parent = clean.get(ancestor)


def _ordered(clean: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Parents before the parameters that depend on them (sampling order); otherwise the order given."""
    done: dict[str, dict[str, Any]] = {}
    pending = dict(clean)
    while pending:
        progressed = False
        for name, param in list(pending.items()):
            parent = (param.get("condition") or {}).get("param") if isinstance(param.get("condition"), dict) else None
            if parent is None or parent in done or parent not in clean:
                done[name] = pending.pop(name)
                progressed = True
        if not progressed:  # a cycle (already reported): keep the rest as given
            done.update(pending)
            break
    return done


def grid(space: dict[str, dict[str, Any]]) -> dict[str, list[Any]] | None:
    """Every parameter's values for a grid search, or None when one has no finite grid (a float without a step)."""
    values: dict[str, list[Any]] = {}
    for name, param in space.items():
        if param["type"] == "categorical":
            values[name] = list(param["choices"])
        elif param["type"] == "int":
            values[name] = list(range(param["low"], param["high"] + 1, param.get("step", 1)))
        elif "step" in param:
            count = math.floor((param["high"] - param["low"]) / param["step"] + 1e-9) + 1
            values[name] = [round(param["low"] + i * param["step"], 12) for i in range(count)]
        else:
            return None
    return values


def grid_size(values: dict[str, list[Any]]) -> int:
    return math.prod(len(v) for v in values.values())


def sample(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Ask the Optuna `trial` for each parameter whose condition holds (define-by-run), parents first."""
    chosen: dict[str, Any] = {}
    for name, param in space.items():
        condition = param.get("condition")
        if condition and chosen.get(condition["param"], _MISSING) not in condition["in"]:
            continue
        if param["type"] == "categorical":
            chosen[name] = trial.suggest_categorical(name, param["choices"])
        elif param["type"] == "int":
            chosen[name] = trial.suggest_int(
                name, param["low"], param["high"], step=param.get("step", 1), log=param["log"]
            )
        else:
            chosen[name] = trial.suggest_float(
                name, param["low"], param["high"], step=param.get("step"), log=param["log"]
            )
    return chosen


_MISSING = object()


def example_values(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One point of the space (each parameter's low end or first choice), to check a template with."""
    chosen: dict[str, Any] = {}
    for name, param in space.items():
        condition = param.get("condition")
        if condition and chosen.get(condition["param"], _MISSING) not in condition["in"]:
            continue
        chosen[name] = param["choices"][0] if param["type"] == "categorical" else param["low"]
    return chosen


def references(value: Any) -> set[str]:
    """The parameter names a template refers to as `${trial.<name>}`, anywhere in it."""
    if isinstance(value, str):
        return set(REFERENCE_RE.findall(value))
    if isinstance(value, dict):
        return set(itertools.chain.from_iterable(references(v) for v in value.values()))
    if isinstance(value, list):
        return set(itertools.chain.from_iterable(references(v) for v in value))
    return set()


def fill(value: Any, params: dict[str, Any], number: int) -> Any:
    """The template with the trial's values: a value that is exactly `${trial.x}` becomes x itself (a number stays a
    number); inside text it is written out. `${trial.number}` is the trial's number. An argument that refers to a
    conditional parameter the trial did not sample is dropped (the template's default applies)."""
    values = {"number": number, **params}
    if isinstance(value, str):
        whole = REFERENCE_RE.fullmatch(value)
        if whole:
            return values.get(whole.group(1), _MISSING)
        return REFERENCE_RE.sub(lambda m: "" if m.group(1) not in values else _text(values[m.group(1)]), value)
    if isinstance(value, dict):
        filled = {k: fill(v, params, number) for k, v in value.items()}
        return {k: v for k, v in filled.items() if v is not _MISSING}
    if isinstance(value, list):
        return [v for v in (fill(v, params, number) for v in value) if v is not _MISSING]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
