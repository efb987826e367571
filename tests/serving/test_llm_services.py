"""`llm` services in the control plane (no processes; an agent that only heartbeats): one is created without a
registered model (the packaged chat model) through the service functions and the API, its settings are checked by
field, its replicas run the model server's llm runtime in the `llm` task environment, a registered version is
served by its path (a Hugging Face folder or a LoRA adapter), and on Kubernetes it is a Deployment of that command
whose manifests validate, even where the cluster has KServe."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.local.launch import TaskEnvironmentMissing, expand
from apps.runtime.models import KubeWorkload, LocalWorkload, Operator
from apps.runtime.workload import Workload
from apps.serving.models import Framework, InferenceService
from apps.serving.services import create_service, deploy
from tests.conftest import user_client
from tests.runtime.factories import ClusterFactory, bind
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, register  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("artifact_store")


def command_of(revision) -> list[str]:
    [replica] = revision.replicas.all()
    return LocalWorkload.objects.get(uid=replica.handle).spec["command"]


def arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_an_llm_service_serves_the_packaged_chat_model_in_the_llm_environment(world):
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="chat", framework="llm", cpu="2", deploy=True)

    assert service.framework == Framework.LLM
    assert service.memory_bytes == 2 * 2**30  # what a chat model needs by default, not the 1Gi of the others
    revision = service.revisions.get()
    assert revision.model_version is None
    command = command_of(revision)
    assert command[:5] == ["{python:llm}", "-m", "apps.serving.modelserver", "--runtime", "llm"]
    assert arg(command, "--model") == "packaged:smollm2"
    assert arg(command, "--name") == "chat"
    assert arg(command, "--threads") == "2"  # the forward pass uses the CPUs the replica requests


def test_the_llm_environment_is_resolved_like_a_task_environment(tmp_path, settings):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert expand(["{python:llm}", "-m", "x"], {"llm": str(python)}) == [str(python), "-m", "x"]
    with pytest.raises(TaskEnvironmentMissing, match="make llm-env"):
        expand(["{python:llm}"], {"llm": str(tmp_path / "missing")})
    assert settings.PORTAL_TASK_ENVS["llm"].endswith(".venv-llm/bin/python")


def test_a_registered_version_is_served_from_its_folder(world):
    heartbeat_agent()
    version = register(world.project_a, world.alice, b"{}", model_name="tuned-chat")
    service = create_service(world.project_a, world.alice, name="tuned", framework="llm", memory="3Gi",
                             registered_model=version.registered_model, model_version=1, deploy=True)  # fmt: skip

    revision = service.revisions.get()
    assert revision.model_version == version
    assert arg(command_of(revision), "--model") == revision.config["model_path"]
    assert revision.config["model_path"].endswith("/model")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"memory": "1Gi"}, "memory"),
        ({"command": "python serve.py"}, "command"),
        ({"registered_model": "nope"}, "registered_model"),
        ({"framework": "llama"}, "framework"),
    ],
)
def test_its_settings_are_checked_by_field(world, values, field):
    with pytest.raises(ValidationError) as caught:
        create_service(world.project_a, world.alice, name="chat", **{"framework": "llm", **values})
    assert field in caught.value.message_dict
    assert not InferenceService.objects.exists()


def test_an_editor_creates_and_deploys_one_through_the_api(world):
    heartbeat_agent()
    body = {"project": "project-a", "name": "chat", "framework": "llm", "deploy": True}
    response = user_client(world.bob).post("/api/v1/services/", body, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["framework"] == "llm"
    assert response.json()["status"] == "deploying"
    bad = user_client(world.bob).post("/api/v1/services/", {**body, "name": "c2", "memory": "512Mi"}, format="json")
    assert bad.status_code == 400
    assert "memory" in bad.json()
    outsider = user_client(world.charlie).post("/api/v1/services/", {**body, "name": "c3"}, format="json")
    assert outsider.status_code in (400, 403, 404)
    assert not InferenceService.objects.filter(name="c3").exists()


def test_on_kubernetes_it_is_a_deployment_of_the_llm_runtime_that_validates(world, settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    project = world.project_a
    project.runtime = "kubernetes"
    project.save()
    cluster = ClusterFactory(operators=[Operator.KSERVE], work_volume_claim="portal-work")
    binding = bind(cluster, project, namespace="team-a")
    service = create_service(project, world.alice, name="chat", framework="llm", cpu="4", memory="4Gi",
                             min_replicas=1, max_replicas=3, scale_metric="cpu", scale_target=70)  # fmt: skip
    revision = deploy(service, world.alice)

    assert revision.config["mode"] == "deployment"  # KServe's runtimes do not run our chat server
    [replica] = revision.replicas.all()
    workload = Workload.from_dict(KubeWorkload.objects.get(uid=replica.handle).spec)
    objects = build(workload, ClusterProfile.of(cluster, binding.effective_namespace))
    assert [o["kind"] for o in objects] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"] + container.get("args", [])
    assert command[:5] == ["python", "-m", "apps.serving.modelserver", "--runtime", "llm"]
    assert arg(command, "--model") == "packaged:smollm2"
    assert (arg(command, "--threads"), arg(command, "--host"), arg(command, "--port")) == ("4", "0.0.0.0", "8080")
    assert replica.upstream == f"http://{objects[1]['metadata']['name']}.team-a.svc:8080"
    validate_all(objects, cluster.version)


def test_the_services_page_creates_one_and_says_what_memory_it_needs(client, world):
    heartbeat_agent()
    client.force_login(world.bob)
    form = {"name": "chat", "stage": "debug", "registered_model": "", "framework": "llm", "cpu": "1",
            "memory": "1Gi", "gpu": "0", "min_replicas": "1", "max_replicas": "1", "scale_metric": "concurrency",
            "scale_target": "1", "auth": "token", "deploy": "1"}  # fmt: skip
    new = reverse("serving:service-create", kwargs={"project": "project-a"})
    assert "LLM chat (OpenAI-compatible)" in client.get(new).content.decode()

    response = client.post(new, form)
    assert response.status_code == 200
    assert "A chat model needs at least 1536Mi" in response.content.decode()
    assert not InferenceService.objects.exists()

    response = client.post(new, {**form, "memory": "2Gi"})
    assert response.status_code == 302
    service = InferenceService.objects.get(name="chat")
    assert arg(command_of(service.revisions.get()), "--model") == "packaged:smollm2"
