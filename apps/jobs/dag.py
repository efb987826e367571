"""Pipeline specs: the graph of nodes, its order, and validation into the normalized form a run freezes.

A spec is what `Pipeline.spec` stores and the YAML's `spec` holds. `validate_spec` resolves every node's
template to `slug@version`, fills argument defaults, merges and parses resources, checks them against the
project's limits, and reports every problem it finds as `ValidationError({"nodes.<node>.<field>": [...]})`.
"""

from __future__ import annotations

import copy
import heapq
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.jobs.args import FieldErrors, validate_args, validate_args_schema
from apps.runtime.admission import Limits, too_large
from apps.runtime.strategy import Layout, StrategyError
from apps.runtime.strategy import check as check_strategy
from apps.runtime.workload import total_replicas
from portal.lib.resources import MAX_AMOUNT, Resources

NODE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,62})$")
TEMPLATE_REF_RE = re.compile(r"^[-a-zA-Z0-9_]+(@[1-9][0-9]*)?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FAILURE_POLICIES = ("fail_fast", "continue")  # the values of models.FailurePolicy
MAX_RETRIES = 10
# Bounds of the numbers a spec holds: past them a value is a mistake, not a wish, and past the columns and timers
# it reaches it failed when the run started (priority 2**63 overflowed `PipelineRun.priority`).
MAX_PRIORITY = 1_000_000_000  # Kubernetes' bound for user priority classes; fits PipelineRun.priority (32 bits)
MAX_TIMEOUT = 365 * 24 * 3600  # a year, in seconds
MAX_BACKOFF = 24 * 3600  # a day between attempts
MAX_PARALLELISM = 10_000

SPEC_DEFAULTS: dict[str, Any] = {"parallelism": 0, "priority": 0, "failure_policy": "fail_fast", "env": {}}
NODE_DEFAULTS: dict[str, Any] = {
    "args": {},
    "depends_on": [],
    "resources": {},
    "retries": 0,
    "retry_backoff": 10,
    "timeout": None,
    "skip": False,
    "cache": True,
    "env": {},
}
# A node's `strategy` overrides its template's, key by key (docs/distributed.md); the normalized node holds the merged
# block only where there is one, so that specs without strategies (and their cache keys) stay as they were.
_NODE_KEYS = {"name", "template", "strategy", *NODE_DEFAULTS}
_RESOURCE_FIELDS = ("cpu", "memory", "gpu", "gpu_type", "vgpu")
_DONE = object()


class TemplateLike(Protocol):
    """What validation needs of a job template (a `JobTemplate`, or a stand-in in tests; a stand-in without kind,
    framework, replicas, strategy or command is a plain job)."""

    slug: str
    version: int
    args_schema: dict[str, Any]
    resources: dict[str, Any]
    timeout: int | None


def find_cycle(nodes: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle among `{node: [its dependencies]}` as a closed path, or None.

    The path runs the way work flows (a dependency before its dependant) and starts at the earliest node
    of the cycle in `nodes` order, e.g. ["a", "b", "c", "a"]. Dependencies on unknown nodes are ignored.
    """
    order = {name: index for index, name in enumerate(nodes)}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in nodes:
        if root in state:
            continue
        path = [root]
        pending = [iter(nodes[root])]
        state[root] = 1
        while pending:
            dependency = next(pending[-1], _DONE)
            if dependency is _DONE:
                state[path.pop()] = 2
                pending.pop()
            elif dependency not in nodes or state.get(dependency) == 2:
                continue
            elif state.get(dependency) == 1:
                cycle = path[path.index(dependency) :][::-1]  # dependency first: the way work flows
                start = min(range(len(cycle)), key=lambda i: order[cycle[i]])
                cycle = cycle[start:] + cycle[:start]
                return [*cycle, cycle[0]]
            else:
                state[dependency] = 1
                path.append(dependency)
                pending.append(iter(nodes[dependency]))
    return None


def topological_order(nodes: Mapping[str, list[str]]) -> list[str]:
    """Nodes with every dependency before its dependants; among nodes ready together, `nodes` order wins.

    So a spec already written in a valid order comes back unchanged. ValueError on an unknown dependency
    or a cycle.
    """
    index = {name: position for position, name in enumerate(nodes)}
    waiting_on = {name: len(set(dependencies)) for name, dependencies in nodes.items()}
    dependants: dict[str, list[str]] = {name: [] for name in nodes}
    for name, dependencies in nodes.items():
        for dependency in set(dependencies):
            if dependency not in nodes:
                raise ValueError(f"{name} depends on unknown node {dependency!r}")
            dependants[dependency].append(name)
    ready = [index[name] for name, count in waiting_on.items() if count == 0]
    heapq.heapify(ready)
    names = list(nodes)
    result: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        result.append(name)
        for dependant in dependants[name]:
            waiting_on[dependant] -= 1
            if waiting_on[dependant] == 0:
                heapq.heappush(ready, index[dependant])
    if len(result) < len(nodes):
        raise ValueError("cycle: " + " → ".join(find_cycle(nodes) or []))
    return result


def validate_spec(
    spec: Any,
    *,
    resolve_template: Callable[[str], TemplateLike | None],
    limits: Limits,
) -> dict[str, Any]:
    """The spec normalized: every key present, templates as `slug@version`, args complete, resources parsed.

    `resolve_template(ref)` finds a template by "slug" (latest) or "slug@3", or returns None. `limits` is the
    most one node may ask for (apps/runtime/admission.py: `node_limits`). Raises ValidationError with every
    problem found.
    The result validates to itself, so a frozen run's spec can be checked again.
    """
    if not isinstance(spec, dict):
        raise ValidationError({"spec": [_("The spec must be a mapping.")]})
    errors = FieldErrors()
    for key in spec:
        if key not in {*SPEC_DEFAULTS, "nodes"}:
            errors.add("spec", _("Unknown key “%(key)s”.") % {"key": key})

    result: dict[str, Any] = {key: copy.deepcopy(spec.get(key, default)) for key, default in SPEC_DEFAULTS.items()}
    if not _is_int(result["parallelism"]) or not 0 <= result["parallelism"] <= MAX_PARALLELISM:
        errors.add(
            "parallelism",
            _("Must be a whole number from 0 (unlimited) to %(max)s.") % {"max": MAX_PARALLELISM},
        )
    if not _is_int(result["priority"]) or not -MAX_PRIORITY <= result["priority"] <= MAX_PRIORITY:
        errors.add("priority", _("Must be a whole number from %(min)s to %(max)s.") % {
            "min": -MAX_PRIORITY, "max": MAX_PRIORITY,
        })  # fmt: skip
    if result["failure_policy"] not in FAILURE_POLICIES:
        errors.add("failure_policy", _("Must be one of: %(choices)s.") % {"choices": ", ".join(FAILURE_POLICIES)})
    _check_env(result["env"], "env", errors)

    raw_nodes = spec.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        errors.add("nodes", _("A pipeline needs a list of at least one node."))
        errors.raise_if_any()
    keys = [_node_key(node, position) for position, node in enumerate(raw_nodes)]
    names = _check_names(raw_nodes, keys, errors)
    result["nodes"] = [
        _validate_node(node, key, names, resolve_template, limits, errors)
        for node, key in zip(raw_nodes, keys, strict=True)
        if isinstance(node, dict)
    ]

    graph = {
        node["name"]: [d for d in node["depends_on"] if d in names and d != node["name"]]
        for node in result["nodes"]
        if isinstance(node["name"], str) and node["name"] in names
    }
    cycle = find_cycle(graph)
    if cycle:
        errors.add("nodes", _("cycle: %(path)s") % {"path": " → ".join(cycle)})
    errors.raise_if_any()
    return result


def _node_key(node: Any, position: int) -> str:
    """How errors name a node: by its name when it has a usable one (the editor finds it), else by position."""
    name = node.get("name") if isinstance(node, dict) else None
    return name if isinstance(name, str) and name else str(position)


def _check_names(raw_nodes: list[Any], keys: list[str], errors: FieldErrors) -> set[str]:
    """The valid, unique node names; problems with the others."""
    seen: set[str] = set()
    for node, key in zip(raw_nodes, keys, strict=True):
        if not isinstance(node, dict):
            errors.add(f"nodes.{key}", _("A node must be a mapping."))
            continue
        name = node.get("name")
        if not isinstance(name, str) or not name:
            errors.add(f"nodes.{key}.name", _("Every node needs a name."))
        elif not NODE_NAME_RE.match(name):
            errors.add(
                f"nodes.{key}.name",
                _("Use 1–63 lowercase letters, digits, “-” or “_”, starting with a letter or digit."),
            )
        elif name in seen:
            errors.add(f"nodes.{key}.name", _("Another node already has this name."))
        else:
            seen.add(name)
    return seen


def _validate_node(
    node: dict[str, Any],
    key: str,
    names: set[str],
    resolve_template: Callable[[str], TemplateLike | None],
    limits: Limits,
    errors: FieldErrors,
) -> dict[str, Any]:
    prefix = f"nodes.{key}"
    for field in node:
        if field not in _NODE_KEYS:
            errors.add(f"{prefix}.{field}", _("Unknown field."))
    result: dict[str, Any] = {"name": node.get("name"), "template": node.get("template")}
    result.update((field, copy.deepcopy(node.get(field, default))) for field, default in NODE_DEFAULTS.items())

    template = _resolve(node.get("template"), prefix, resolve_template, errors)
    if template is not None:
        result["template"] = f"{template.slug}@{template.version}"
        try:
            validate_args_schema(template.args_schema)
            result["args"] = validate_args(template.args_schema, result["args"], f"{prefix}.args")
        except ValidationError as exc:
            if "args_schema" in exc.message_dict:
                message = _("The template “%(ref)s” has an invalid argument schema; fix the template.")
                errors.add(f"{prefix}.template", message % {"ref": result["template"]})
            else:
                errors.merge(exc)
        if node.get("timeout") is None:
            result["timeout"] = template.timeout
    elif not isinstance(result["args"], dict):
        errors.add(f"{prefix}.args", _("Arguments must be a mapping of name to value."))

    result["depends_on"] = _check_depends_on(result["depends_on"], result["name"], names, prefix, errors)
    replicas = total_replicas(
        getattr(template, "kind", "job"),
        getattr(template, "replicas", None),
        framework=getattr(template, "framework", ""),
        runtime=limits.runtime,
    )
    result["resources"] = _check_resources(
        template.resources if template is not None else {}, result["resources"], limits, prefix, errors, replicas
    )
    strategy = _check_strategy(template, node.get("strategy"), result["resources"], prefix, errors)
    if strategy:
        result["strategy"] = strategy
    retries, backoff, timeout = result["retries"], result["retry_backoff"], result["timeout"]
    if not _is_int(retries) or not 0 <= retries <= MAX_RETRIES:
        errors.add(f"{prefix}.retries", _("Must be a whole number from 0 to %(max)s.") % {"max": MAX_RETRIES})
    if not _is_int(backoff) or not 0 <= backoff <= MAX_BACKOFF:
        errors.add(
            f"{prefix}.retry_backoff",
            _("Must be a whole number of seconds from 0 to %(max)s.") % {"max": MAX_BACKOFF},
        )
    if timeout is not None and (not _is_int(timeout) or not 0 < timeout <= MAX_TIMEOUT):
        errors.add(
            f"{prefix}.timeout",
            _("Must be a whole number of seconds from 1 to %(max)s, or empty for none.") % {"max": MAX_TIMEOUT},
        )
    for flag in ("skip", "cache"):
        if not isinstance(result[flag], bool):
            errors.add(f"{prefix}.{flag}", _("Must be true or false."))
    _check_env(result["env"], f"{prefix}.env", errors)
    return result


def node_strategy(template: TemplateLike, override: Any, resources: Any) -> tuple[dict[str, Any], Layout] | None:
    """The strategy of a node (its template's, overridden key by key by the node's; a null keeps the template's
    value) and its layout over the template's replicas and the node's GPUs; None when there is none.
    StrategyError names the field that cannot run; a `TypeError` when `override` is not a mapping."""
    if override is None:
        override = {}
    if not isinstance(override, dict):
        raise TypeError("strategy")
    merged = {**(getattr(template, "strategy", None) or {}), **{k: v for k, v in override.items() if v is not None}}
    if not merged:
        return None
    try:
        parsed = Resources.parse(resources) if isinstance(resources, dict) else Resources()
    except ValueError:
        parsed = Resources()  # the resources' own errors are reported on their fields
    return check_strategy(
        merged, kind=getattr(template, "kind", "job"), framework=getattr(template, "framework", ""),
        replicas=getattr(template, "replicas", None), gpus=parsed.gpu, gpu_type=parsed.gpu_type,
        command=list(getattr(template, "command", None) or []) or None,
    )  # fmt: skip


def _check_strategy(
    template: TemplateLike | None, override: Any, resources: Any, prefix: str, errors: FieldErrors
) -> dict[str, Any] | None:
    key = f"{prefix}.strategy"
    if template is None:
        if override is not None and not isinstance(override, dict):
            errors.add(key, _("Must be a mapping of the strategy's fields."))
        return override or None
    try:
        found = node_strategy(template, override, resources)
    except TypeError:
        errors.add(key, _("Must be a mapping of the strategy's fields."))
        return None
    except StrategyError as exc:
        errors.add(f"{key}.{exc.field}" if exc.field else key, exc.message)
        return override or None
    return found[0] if found else None


def _resolve(
    ref: Any, prefix: str, resolve_template: Callable[[str], TemplateLike | None], errors: FieldErrors
) -> TemplateLike | None:
    if not isinstance(ref, str) or not ref:
        errors.add(f"{prefix}.template", _("Every node needs a template."))
        return None
    if not TEMPLATE_REF_RE.match(ref):
        errors.add(
            f"{prefix}.template", _("“%(ref)s” is not a template reference (use slug or slug@version).") % {"ref": ref}
        )
        return None
    template = resolve_template(ref)
    if template is None:
        errors.add(f"{prefix}.template", _("Unknown template “%(ref)s”.") % {"ref": ref})
    return template


def _check_depends_on(value: Any, name: Any, names: set[str], prefix: str, errors: FieldErrors) -> list[str]:
    key = f"{prefix}.depends_on"
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        errors.add(key, _("Must be a list of node names."))
        return []
    for dependency in value:
        if dependency == name:
            errors.add(key, _("A node cannot depend on itself."))
        elif dependency not in names:
            errors.add(key, _("Unknown node “%(name)s”.") % {"name": dependency})
    return list(dict.fromkeys(value))  # a repeated dependency means nothing more


def _check_resources(
    defaults: dict[str, Any] | None,
    overrides: Any,
    limits: Limits,
    prefix: str,
    errors: FieldErrors,
    replicas: int = 1,
) -> dict[str, Any]:
    """Template defaults overridden by the node, parsed, as {"cpu": float, "memory": bytes | None, "gpu": float}."""
    key = f"{prefix}.resources"
    if not isinstance(overrides, dict):
        errors.add(key, _("Must be a mapping of cpu, memory and gpu."))
        return overrides
    # A null asks for nothing in particular, so the template's default stands (as for arguments).
    merged = {**(defaults or {}), **{field: value for field, value in overrides.items() if value is not None}}
    bad = False
    for field, value in merged.items():
        try:  # field by field, so that each error lands on its own field
            Resources.parse({field: value})
        except ValueError:
            bad = True
            errors.add(f"{key}.{field}", resource_message(field, value))
    if bad:
        return merged
    resources = Resources.parse(merged)
    for name, message in too_large(resources, limits, replicas=replicas).items():
        errors.add(f"{key}.{name}", message)
    return resources.to_spec()


def resource_message(field: str, value: Any) -> str:
    if field not in _RESOURCE_FIELDS:
        return _("Unknown resource (use cpu, memory, gpu, gpu_type or vgpu).")
    if field == "memory":
        return _("“%(value)s” is not a memory size (use e.g. 512Mi, 2Gi or a number of bytes).") % {"value": value}
    if field == "vgpu":
        return _("Must be a mapping of vGPU resource to an amount of 0 or more, e.g. {memory: 8000}.")
    return _("“%(value)s” is not a number from 0 to %(max)s.") % {"value": value, "max": int(MAX_AMOUNT)}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_env(value: Any, key: str, errors: FieldErrors) -> None:
    if not isinstance(value, dict):
        errors.add(key, _("Must be a mapping of variable name to text."))
        return
    for name, text in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            errors.add(key, _("“%(name)s” is not a valid variable name.") % {"name": name})
        elif not isinstance(text, str):
            # YAML reads `SEED: 42` as a number; the environment only holds text (as on Kubernetes).
            errors.add(f"{key}.{name}", _('Must be text (quote it in YAML: "%(value)s").') % {"value": text})
