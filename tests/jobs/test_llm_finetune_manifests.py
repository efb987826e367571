"""The LoRA fine-tune on Kubernetes (dry run): a PyTorchJob of the portal's image running the llm environment's
script, one replica by default (rank 0 alone), DDP with a Master and Workers when a project's copy asks for more,
GPUs requested when a node asks for them; every manifest validates against the schemas."""

from __future__ import annotations

import json
from io import StringIO

import pytest
import yaml
from django.core.management import call_command

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import JobTemplate
from apps.jobs.services import create_template, save_pipeline
from apps.runtime.kubernetes.validation import validate_all
from tests.factories import dataset, dataset_version
from tests.runtime.factories import ClusterFactory, bind

pytestmark = pytest.mark.django_db
ROW = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Topic: sport"}]}


@pytest.fixture
def cluster(world):
    cluster = ClusterFactory(
        name="lab", version="1.33", work_volume_claim="portal-work", operators=["training-operator"]
    )
    bind(cluster, world.project_a, namespace="team-a", is_default=True)
    load_builtin_templates()
    dataset_version(dataset(world.project_a, world.alice, name="chat"), {"rows.jsonl": json.dumps(ROW).encode()})
    return cluster


def manifests(world, name: str, node: dict) -> list[dict]:
    save_pipeline(world.project_a, world.alice, name=name, spec={"nodes": [node]})
    out = StringIO()
    call_command("pipeline_manifests", f"project-a/{name}", stdout=out)
    objects = [doc for doc in yaml.safe_load_all(out.getvalue()) if doc]
    validate_all(objects, "1.33")
    return objects


def container(job: dict, role: str) -> dict:
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def test_the_template_renders_as_a_one_replica_pytorchjob_in_the_llm_environment(world, cluster):
    node = {"name": "tune", "template": "llm-lora-finetune", "args": {"dataset": "chat", "max_steps": 5}}
    [job] = manifests(world, "tune", node)

    assert job["kind"] == "PyTorchJob"
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}  # one replica: rank 0, no DDP
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    master = container(job, "Master")
    argv = master.get("command", []) + master.get("args", [])
    assert "apps.jobs.builtin_tasks.llm_lora_finetune" in argv
    assert argv[argv.index("--max_steps") + 1] == "5"
    assert "nvidia.com/gpu" not in master["resources"].get("limits", {})
    env = {item["name"]: item.get("value") for item in master.get("env", [])}
    assert env["HF_HUB_OFFLINE"] == "1"


def test_more_replicas_train_with_ddp_and_a_node_can_ask_for_gpus(world, cluster):
    builtin = JobTemplate.objects.get(slug="llm-lora-finetune", project=None)
    create_template(
        project=world.project_a, slug="lora-ddp", name="LoRA on 3 GPUs", command=builtin.command, env=builtin.env,
        args_schema=builtin.args_schema, resources=builtin.resources, kind="distributed", framework="pytorch",
        replicas={"worker": 3}, image=builtin.image, timeout=builtin.timeout,
    )  # fmt: skip
    node = {"name": "tune", "template": "lora-ddp", "args": {"dataset": "chat", "precision": "bf16"},
            "resources": {"gpu": 1, "cpu": 4, "memory": "16Gi"}}  # fmt: skip
    [job] = manifests(world, "ddp", node)

    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in replicas.items()} == {"Master": 1, "Worker": 2}  # WORLD_SIZE 3
    for role in replicas:
        assert str(container(job, role)["resources"]["limits"]["nvidia.com/gpu"]) == "1"
        argv = container(job, role).get("command", []) + container(job, role).get("args", [])
        assert argv[argv.index("--precision") + 1] == "bf16"
