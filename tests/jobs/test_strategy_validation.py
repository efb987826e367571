"""A distributed strategy through the portal's doors: a template's default and a node's override, refused with a 400
naming the field through the API and as a field error in the editor's check, the layout the editor shows, and the
strategy that reaches the dispatched workload (and the cache key)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.dryrun import pipeline_workloads
from apps.jobs.models import JobTemplate
from apps.jobs.orchestrator import cache_key
from apps.jobs.services import save_pipeline
from apps.runtime.placement import Pool
from tests.conftest import user_client
from tests.factories import python_template
from tests.jobs.test_editor_views import script_data

TEMPLATES = "/api/v1/templates/"
PIPELINES = "/api/v1/pipelines/"


def template_body(**fields: Any) -> dict[str, Any]:
    return {
        "project": "project-a", "slug": "train", "name": "Train", "command": ["python", "-m", "train"],
        "kind": "distributed", "framework": "pytorch", "replicas": {"worker": 2}, **fields,
    }  # fmt: skip


@pytest.fixture
def ddp(world) -> JobTemplate:
    load_builtin_templates()
    return JobTemplate.objects.filter(slug="pytorch-ddp-train", project=None).latest("version")


def spec_with(strategy: dict[str, Any] | None = None, **node: Any) -> dict[str, Any]:
    values = {"name": "train", "template": "pytorch-ddp-train", **node}
    if strategy is not None:
        values["strategy"] = strategy
    return {"nodes": [values]}


def check(client: Client, spec: dict[str, Any]) -> dict[str, Any]:
    url = reverse("jobs:pipeline-validate", kwargs={"project": "project-a"})
    response = client.post(url, json.dumps({"spec": spec}), content_type="application/json")
    assert response.status_code == 200
    return response.json()


def editor(world) -> Client:
    client = Client()
    client.force_login(world.alice)
    return client


# --- templates --------------------------------------------------------------------------------------------------


def test_a_template_keeps_its_strategy_normalized(world):
    response = user_client(world.alice).post(
        TEMPLATES, template_body(strategy={"type": "fsdp", "precision": "bf16"}), format="json"
    )

    assert response.status_code == 201, response.content
    assert response.json()["strategy"] == {
        "type": "fsdp", "zero_stage": None, "tensor_parallel": 1, "pipeline_parallel": 1, "precision": "bf16",
        "gradient_checkpointing": False, "gradient_accumulation": 1,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        ({"kind": "job", "framework": ""}, "strategy", "Only distributed templates"),
        ({"strategy": {"type": "ddp", "zero_stage": 2}}, "strategy.zero_stage", "ZeRO is DeepSpeed's"),
        ({"strategy": {"type": "fsdp", "tensor_parallel": 4}}, "strategy.tensor_parallel", "world size 2"),
        ({"strategy": {"type": "ddp", "precision": "fp16"}}, "strategy.precision", "fp16 needs a GPU"),
        (
            {"strategy": {"type": "ddp", "precision": "bf16"}, "resources": {"gpu": 1, "gpu_type": "tesla-v100"}},
            "strategy.precision",
            "no bf16",
        ),
        ({"strategy": {"type": "deepspeed"}}, "strategy.type", "DeepSpeed needs a GPU"),
        ({"strategy": {"type": "ddp"}, "framework": "tf"}, "strategy.type", "frameworks pytorch"),
        ({"strategy": ["ddp"]}, "strategy", "Must be a mapping"),
        ({"strategy": "ddp"}, "strategy", "Must be a mapping"),
        ({"strategy": []}, "strategy", "Must be a mapping"),
    ],
)
def test_a_template_whose_strategy_cannot_run_is_a_400_naming_the_field(world, fields, key, words):
    body = template_body(strategy={"type": "ddp"})
    body.update(fields)

    response = user_client(world.alice).post(TEMPLATES, body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [key]
    assert words in response.json()[key][0]
    assert not JobTemplate.objects.filter(slug="train").exists()


# --- pipelines: the API and the editor's check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "resources", "key", "words"),
    [
        ({"type": "ddp", "zero_stage": 1}, {}, "nodes.train.strategy.zero_stage", "ZeRO is DeepSpeed's"),
        ({"type": "ddp", "pipeline_parallel": 2}, {}, "nodes.train.strategy.pipeline_parallel", "data parallel only"),
        (
            {"type": "fsdp", "tensor_parallel": 2, "pipeline_parallel": 2},
            {},
            "nodes.train.strategy.pipeline_parallel",
            "tensor × pipeline = 4 does not divide the world size 2",
        ),
        ({"type": "fsdp", "tensor_parallel": 3}, {}, "nodes.train.strategy.tensor_parallel", "world size 2"),
        ({"precision": "fp16"}, {}, "nodes.train.strategy.precision", "fp16 needs a GPU"),
        ({"precision": "bf16"}, {"gpu": 1, "gpu_type": "nvidia-tesla-t4"}, "nodes.train.strategy.precision", "no bf16"),
        ({"type": "deepspeed", "zero_stage": 2}, {}, "nodes.train.strategy.type", "DeepSpeed needs a GPU"),
        ({"gradient_accumulation": -1}, {}, "nodes.train.strategy.gradient_accumulation", "from 1 to 10000"),
        ({"micro_batch": 4}, {}, "nodes.train.strategy.micro_batch", "Unknown field"),
        ("ddp", {}, "nodes.train.strategy", "Must be a mapping"),
    ],
)
def test_a_node_strategy_that_cannot_run_is_a_400_and_a_field_error_in_the_editor(
    world, ddp, strategy, resources, key, words
):
    spec = spec_with(strategy, resources=resources)

    api = user_client(world.alice).post(PIPELINES, {"project": "project-a", "name": "fit", "spec": spec}, format="json")
    checked = check(editor(world), spec)

    assert api.status_code == 400
    assert list(api.json()) == [key]
    assert words in api.json()[key][0]
    assert checked["valid"] is False
    assert checked["errors"] == api.json()  # the editor shows the field's error before it saves


def test_a_plain_job_takes_no_strategy(world):
    spec = {"nodes": [{"name": "fit", "template": "py", "args": {"code": "1"}, "strategy": {"type": "ddp"}}]}
    python_template()

    errors = check(editor(world), spec)["errors"]

    assert errors == {"nodes.fit.strategy": ["Only distributed templates take a strategy."]}


def test_the_editor_shows_each_distributed_nodes_layout(world, ddp):
    raw = {"type": "fsdp", "tensor_parallel": 2, "pipeline_parallel": 2, "precision": "bf16"}
    spec = {
        "nodes": [
            {
                "name": "big",
                "template": "pytorch-ddp-train",
                "strategy": raw,
                "resources": {"gpu": 4, "gpu_type": "A100"},
            },
            {"name": "small", "template": "pytorch-ddp-train", "strategy": {"gradient_accumulation": 4}},
            {"name": "wrong", "template": "pytorch-ddp-train", "strategy": {"precision": "fp16"}},
        ]
    }

    checked = check(editor(world), spec)

    assert checked["layouts"] == {
        "big": "world 8 = dp 2 × tp 2 × pp 2, fsdp, bf16",
        "small": "world 2 = dp 2 × tp 1 × pp 1, ddp, fp32, accumulate 4",
    }
    assert list(checked["errors"]) == ["nodes.wrong.strategy.precision"]
    saved = save_pipeline(world.project_a, world.alice, name="fit", spec={"nodes": spec["nodes"][:2]})
    page = editor(world).get(reverse("jobs:pipeline-editor", kwargs={"project": "project-a", "pk": saved.pk}))
    data = script_data(page, "editor-data")
    assert data["layouts"] == checked["layouts"]
    template = next(t for t in data["templates"] if t["slug"] == "pytorch-ddp-train")
    assert (template["kind"], template["strategy"]["type"]) == ("distributed", "ddp")
    assert "Distributed strategy" in script_data(page, "editor-messages")["strategy"]


# --- what the runtime gets ----------------------------------------------------------------------------------------


def test_the_node_strategy_overrides_the_templates_and_reaches_the_workload(world, ddp):
    spec = spec_with({"type": "fsdp", "gradient_accumulation": 4, "gradient_checkpointing": True})
    pipe = save_pipeline(world.project_a, world.alice, name="fit", spec=spec)

    [(node, workload)] = pipeline_workloads(pipe, Pool(runtime="local"))

    assert node == "train"
    assert workload.strategy == {
        "type": "fsdp", "zero_stage": None, "tensor_parallel": 1, "pipeline_parallel": 1, "precision": "fp32",
        "gradient_checkpointing": True, "gradient_accumulation": 4,
    }  # fmt: skip
    assert (workload.framework, workload.replicas) == ("pytorch", {"worker": 2})


def test_horovod_is_dispatched_as_an_mpi_workload(world, ddp):
    pipe = save_pipeline(world.project_a, world.alice, name="fit", spec=spec_with({"type": "horovod"}))

    [(_node, workload)] = pipeline_workloads(pipe, Pool(runtime="local"))

    assert (workload.framework, workload.replicas, workload.strategy["type"]) == ("horovod", {"worker": 2}, "horovod")


def test_a_different_strategy_is_a_different_cache_key_and_none_keeps_the_old_key():
    node = {"template": "t@1", "args": {}, "env": {}}

    plain = cache_key(node, {})
    assert cache_key({**node, "strategy": {}}, {}) == plain
    assert cache_key({**node, "strategy": {"type": "ddp", "precision": "bf16"}}, {}) != plain
