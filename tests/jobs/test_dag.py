"""Pipeline graphs and spec validation (apps/jobs/dag.py), with stand-in templates instead of the database."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.dag import FAILURE_POLICIES, find_cycle, topological_order, validate_spec
from apps.jobs.models import FailurePolicy
from apps.runtime.admission import Limits
from portal.lib.resources import UNLIMITED, Resources

GiB = 2**30
NO_LIMITS = Limits()

SPLIT = SimpleNamespace(
    slug="split",
    version=1,
    args_schema={
        "type": "object",
        "properties": {"ratio": {"type": "number", "default": 0.2, "x-portal-type": "float"}},
    },
    resources={"cpu": 1, "memory": "1Gi"},
    timeout=None,
)
TRAIN_V1 = SimpleNamespace(slug="train", version=1, args_schema={}, resources={}, timeout=None)
TRAIN = SimpleNamespace(
    slug="train",
    version=2,
    args_schema={
        "type": "object",
        "properties": {
            "epochs": {"type": "integer", "default": 10, "minimum": 1, "x-portal-type": "int"},
            "optimizer": {"x-portal-type": "enum", "enum": ["sgd", "adam"], "default": "adam"},
            "dataset": {"x-portal-type": "dataset"},
        },
        "required": ["dataset"],
    },
    resources={"cpu": 2, "memory": "4Gi", "gpu": 0},
    timeout=3600,
)
BROKEN = SimpleNamespace(slug="broken", version=1, args_schema={"type": "array"}, resources={}, timeout=None)


def resolve(ref: str) -> SimpleNamespace | None:
    """Like the real resolver: "slug" is the latest version, "slug@3" that version."""
    templates = [SPLIT, TRAIN_V1, TRAIN, BROKEN]
    slug, _, version = ref.partition("@")
    matching = [t for t in templates if t.slug == slug and (not version or t.version == int(version))]
    return max(matching, key=lambda t: t.version) if matching else None


def node(name: str, template: str = "split", **fields: Any) -> dict[str, Any]:
    return {"name": name, "template": template, **fields}


def validate(spec: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
    return validate_spec(spec, resolve_template=resolve, limits=limits or NO_LIMITS)


def errors_of(spec: dict[str, Any], limits: Limits | None = None) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        validate(spec, limits)
    return exc.value.message_dict


# --- find_cycle and topological_order ---------------------------------------------------------


def test_it_finds_no_cycle_in_a_dag():
    assert find_cycle({"a": [], "b": ["a"], "c": ["a", "b"]}) is None


def test_it_names_the_cycle_as_a_path_in_the_direction_work_flows():
    # c needs b, b needs a, a needs c: work would flow a → b → c → a
    assert find_cycle({"start": [], "a": ["c"], "b": ["a"], "c": ["b"]}) == ["a", "b", "c", "a"]


def test_it_starts_the_cycle_at_its_earliest_node_whatever_the_search_order():
    assert find_cycle({"x": [], "b": ["a"], "a": ["b"]}) == ["b", "a", "b"]


def test_it_finds_a_self_loop():
    assert find_cycle({"a": ["a"]}) == ["a", "a"]


def test_it_orders_dependencies_first_and_keeps_spec_order_among_ties():
    nodes = {"evaluate": ["train"], "split": [], "report": [], "train": ["split"]}

    assert topological_order(nodes) == ["split", "report", "train", "evaluate"]


def test_it_keeps_a_spec_that_is_already_in_order_unchanged():
    nodes = {"a": [], "b": ["a"], "c": [], "d": ["b", "c"]}

    assert topological_order(nodes) == ["a", "b", "c", "d"]


def test_it_refuses_to_order_a_cycle_or_an_unknown_dependency():
    with pytest.raises(ValueError, match="cycle: a → b → a"):
        topological_order({"a": ["b"], "b": ["a"]})
    with pytest.raises(ValueError, match="unknown node 'ghost'"):
        topological_order({"a": ["ghost"]})


# --- validate_spec: the graph -----------------------------------------------------------------


def test_it_rejects_cyclic_pipeline_naming_the_cycle():
    spec = {"nodes": [node("a", depends_on=["c"]), node("b", depends_on=["a"]), node("c", depends_on=["b"])]}

    assert errors_of(spec) == {"nodes": ["cycle: a → b → c → a"]}


def test_it_rejects_a_node_that_depends_on_itself():
    assert errors_of({"nodes": [node("a", depends_on=["a"])]}) == {
        "nodes.a.depends_on": ["A node cannot depend on itself."]
    }


def test_it_rejects_a_dependency_on_an_unknown_node():
    assert errors_of({"nodes": [node("a"), node("b", depends_on=["a", "splitt"])]}) == {
        "nodes.b.depends_on": ["Unknown node “splitt”."]
    }


def test_it_rejects_an_empty_pipeline():
    assert errors_of({"nodes": []}) == {"nodes": ["A pipeline needs a list of at least one node."]}
    assert errors_of({}) == {"nodes": ["A pipeline needs a list of at least one node."]}


def test_it_rejects_bad_and_duplicate_node_names():
    spec = {"nodes": [node("Train!"), node("a"), node("a"), {"template": "split"}, "not-a-node"]}

    errors = errors_of(spec)

    assert errors == {
        "nodes.Train!.name": [
            "Use 1–63 lowercase letters, digits, “-” or “_”, starting with a letter or digit.",
        ],
        "nodes.a.name": ["Another node already has this name."],
        "nodes.3.name": ["Every node needs a name."],
        "nodes.4": ["A node must be a mapping."],
    }


def test_it_rejects_a_spec_that_is_not_a_mapping():
    with pytest.raises(ValidationError) as exc:
        validate_spec(["a"], resolve_template=resolve, limits=NO_LIMITS)

    assert exc.value.message_dict == {"spec": ["The spec must be a mapping."]}


# --- validate_spec: templates and arguments ---------------------------------------------------


def test_it_rejects_an_unknown_template_and_a_malformed_reference():
    spec = {"nodes": [node("a", "nosuch"), node("b", "train@9"), node("c", "train@latest"), {"name": "d"}]}

    assert errors_of(spec) == {
        "nodes.a.template": ["Unknown template “nosuch”."],
        "nodes.b.template": ["Unknown template “train@9”."],
        "nodes.c.template": ["“train@latest” is not a template reference (use slug or slug@version)."],
        "nodes.d.template": ["Every node needs a template."],
    }


def test_it_resolves_templates_to_exact_versions():
    spec = {"nodes": [node("a", "train", args={"dataset": "iris"}), node("b", "train@1")]}

    result = validate(spec)

    assert [n["template"] for n in result["nodes"]] == ["train@2", "train@1"]


def test_it_reports_argument_errors_per_node_and_field():
    spec = {
        "nodes": [
            node("split", args={"ratio": "0.2x"}),
            node("train", "train", args={"epochs": "ten", "optimizer": "rmsprop", "lr": 0.1}),
        ]
    }

    assert errors_of(spec) == {
        "nodes.split.args.ratio": ["0.2x is not a number"],
        "nodes.train.args.dataset": ["required"],
        "nodes.train.args.epochs": ["ten is not a whole number"],
        "nodes.train.args.optimizer": ["rmsprop is not one of: sgd, adam"],
        "nodes.train.args.lr": ["unknown argument"],
    }


def test_it_blames_the_template_when_its_argument_schema_is_broken():
    assert errors_of({"nodes": [node("a", "broken")]}) == {
        "nodes.a.template": ["The template “broken@1” has an invalid argument schema; fix the template."]
    }


# --- validate_spec: the normalized result -----------------------------------------------------


def test_it_fills_every_default_and_normalizes_resources():
    spec = {
        "nodes": [
            node("split"),
            node("train", "train", args={"dataset": "iris", "epochs": 3}, depends_on=["split", "split"]),
        ]
    }

    result = validate(spec)

    assert result == {
        "parallelism": 0,
        "priority": 0,
        "failure_policy": "fail_fast",
        "env": {},
        "nodes": [
            {
                "name": "split",
                "template": "split@1",
                "args": {"ratio": 0.2},
                "depends_on": [],
                "resources": {"cpu": 1.0, "memory": GiB, "gpu": 0.0},
                "retries": 0,
                "retry_backoff": 10,
                "timeout": None,
                "skip": False,
                "cache": True,
                "env": {},
            },
            {
                "name": "train",
                "template": "train@2",
                "args": {"epochs": 3, "optimizer": "adam", "dataset": "iris"},
                "depends_on": ["split"],
                "resources": {"cpu": 2.0, "memory": 4 * GiB, "gpu": 0.0},
                "retries": 0,
                "retry_backoff": 10,
                "timeout": 3600,
                "skip": False,
                "cache": True,
                "env": {},
            },
        ],
    }


def test_a_normalized_spec_validates_to_itself_and_the_input_is_left_alone():
    spec = {"nodes": [node("train", "train", args={"dataset": "iris"}, resources={"memory": "512Mi"})]}
    original = copy.deepcopy(spec)

    once = validate(spec)

    assert validate(once) == once
    assert spec == original


def test_node_resources_override_the_template_defaults_and_accept_memory_strings():
    spec = {
        "nodes": [
            node("a", "train", args={"dataset": "d"}, resources={"memory": "512Mi", "gpu": 1, "gpu_type": "A100"}),
            node("b", "train", args={"dataset": "d"}, resources={"memory": "2G", "cpu": "0.5"}),
            node("c", "train", args={"dataset": "d"}, resources={"memory": 1024, "cpu": None}),
            node("d", "train", args={"dataset": "d"}, resources={"gpu": 0.5, "vgpu": {"memory": 8000}}),
        ]
    }

    a, b, c, d = (n["resources"] for n in validate(spec)["nodes"])

    assert a == {"cpu": 2.0, "memory": 512 * 2**20, "gpu": 1.0, "gpu_type": "A100"}
    assert b == {"cpu": 0.5, "memory": 2 * 10**9, "gpu": 0.0}
    assert c == {"cpu": 2.0, "memory": 1024, "gpu": 0.0}  # a null keeps the template's default
    assert d == {"cpu": 2.0, "memory": 4 * GiB, "gpu": 0.5, "vgpu": {"memory": 8000.0}}


def test_it_reports_bad_resources_on_their_own_field():
    spec = {"nodes": [node("a", resources={"cpu": "lots", "memory": "2 gigs", "gpu": -1, "disk": "10Gi", "vgpu": 3})]}

    assert errors_of(spec) == {
        "nodes.a.resources.cpu": ["“lots” is not a number from 0 to 1000000."],
        "nodes.a.resources.memory": ["“2 gigs” is not a memory size (use e.g. 512Mi, 2Gi or a number of bytes)."],
        "nodes.a.resources.gpu": ["“-1” is not a number from 0 to 1000000."],
        "nodes.a.resources.disk": ["Unknown resource (use cpu, memory, gpu, gpu_type or vgpu)."],
        "nodes.a.resources.vgpu": [
            "Must be a mapping of vGPU resource to an amount of 0 or more, e.g. {memory: 8000}."
        ],
    }


def test_it_rejects_nodes_asking_more_than_the_project_limits():
    limits = Limits(Resources.of(cpu=8, memory=8 * GiB, gpu=0))
    spec = {
        "nodes": [
            node("small", resources={"cpu": 8, "memory": "8Gi"}),
            node("big", resources={"cpu": 16, "memory": "16Gi", "gpu": 1}),
            node("huge", resources={"cpu": 1, "memory": "1.5Ti"}),
        ]
    }

    assert errors_of(spec, limits) == {
        "nodes.big.resources.cpu": ["asks for 16 CPU cores; the limit is 8 (the project's quota)"],
        "nodes.big.resources.memory": ["asks for 16 GiB of memory; the limit is 8 GiB (the project's quota)"],
        "nodes.big.resources.gpu": ["asks for 1 GPU; the limit is 0 (the project's quota)"],
        "nodes.huge.resources.memory": ["asks for 1.5 TiB of memory; the limit is 8 GiB (the project's quota)"],
    }


def test_a_missing_limit_means_unlimited():
    spec = {"nodes": [node("a", resources={"cpu": 64, "memory": "1Ti", "gpu": 8})]}

    limits = Limits(Resources.of(cpu=64, memory=UNLIMITED, gpu=UNLIMITED))
    assert validate(spec, limits)["nodes"][0]["resources"]["gpu"] == 8.0


# --- validate_spec: the other fields ----------------------------------------------------------


def test_it_reports_every_bad_field_at_once():
    spec = {
        "parallelism": -1,
        "priority": "high",
        "failure_policy": "retry",
        "env": {"SEED": 42, "bad name": "x"},
        "schedule": "daily",
        "nodes": [
            node(
                "a",
                retries=11,
                retry_backoff=-5,
                timeout=0,
                skip="no",
                cache=None,
                env=[],
                depends_on="b",
                resources="big",
                colour="red",
            ),
            node("b", retries=True, timeout=1.5),
        ],
    }

    assert errors_of(spec) == {
        "spec": ["Unknown key “schedule”."],
        "parallelism": ["Must be a whole number from 0 (unlimited) to 10000."],
        "priority": ["Must be a whole number from -1000000000 to 1000000000."],
        "failure_policy": ["Must be one of: fail_fast, continue."],
        "env.SEED": ['Must be text (quote it in YAML: "42").'],
        "env": ["“bad name” is not a valid variable name."],
        "nodes.a.colour": ["Unknown field."],
        "nodes.a.depends_on": ["Must be a list of node names."],
        "nodes.a.resources": ["Must be a mapping of cpu, memory and gpu."],
        "nodes.a.retries": ["Must be a whole number from 0 to 10."],
        "nodes.a.retry_backoff": ["Must be a whole number of seconds from 0 to 86400."],
        "nodes.a.timeout": ["Must be a whole number of seconds from 1 to 31536000, or empty for none."],
        "nodes.a.skip": ["Must be true or false."],
        "nodes.a.cache": ["Must be true or false."],
        "nodes.a.env": ["Must be a mapping of variable name to text."],
        "nodes.b.retries": ["Must be a whole number from 0 to 10."],
        "nodes.b.timeout": ["Must be a whole number of seconds from 1 to 31536000, or empty for none."],
    }


def test_it_keeps_valid_pipeline_settings():
    spec = {
        "parallelism": 2,
        "priority": -5,
        "failure_policy": "continue",
        "env": {"PYTHONHASHSEED": "0"},
        "nodes": [node("a", retries=3, retry_backoff=0, timeout=60, skip=True, cache=False, env={"DEBUG": "1"})],
    }

    result = validate(spec)

    assert (result["parallelism"], result["priority"], result["failure_policy"]) == (2, -5, "continue")
    assert result["env"] == {"PYTHONHASHSEED": "0"}
    a = result["nodes"][0]
    assert (a["retries"], a["retry_backoff"], a["timeout"], a["skip"], a["cache"]) == (3, 0, 60, True, False)
    assert a["env"] == {"DEBUG": "1"}


def test_the_failure_policies_match_the_model_choices():
    assert set(FAILURE_POLICIES) == set(FailurePolicy.values)
