"""The controller applies a workload's objects exactly once: retries, 409 → adopt what is ours, fail cleanly on
what is not, on what the cluster cannot express and on what the API server refuses; pull Secrets."""

from __future__ import annotations

import base64
import dataclasses
import json

from apps.jobs.models import Image
from apps.runtime.kubernetes.manifests import build, resource_of
from apps.runtime.kubernetes.manifests.meta import registry_secret_name
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Cluster, KubeWorkload
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.conftest import LABEL, fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_distributed, sample_job, sample_service

JOBS = ("batch", "jobs")


def test_a_create_retried_through_500s_and_a_lost_answer_makes_one_job(fake, cluster, listener, run_controller):
    fake.faults.fail("POST", r"/jobs$", 500, times=2)
    lost = fake.faults.lose("POST", r"/jobs$")  # created, but the controller never hears so: its retry gets 409
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    wait_for(lambda: KubeWorkload.objects.get(uid="task-1").created, message="never created")
    assert lost.hits == 1
    assert len(fake.requests_to("POST", "/jobs")) == 4
    assert [j["metadata"]["name"] for j in fake.objects(*JOBS, "team-a")] == [name]
    fake.sim.start(name)
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-1") == "succeeded")


def test_objects_left_by_an_earlier_attempt_are_adopted(fake, cluster, listener, run_controller):
    """A controller created the objects and died before recording it: the next one adopts them."""
    workload = mine(sample_service(), "svc-1")
    fresh_runtime().submit(workload)
    objs = build(workload, ClusterProfile.of(cluster, "team-a"))
    for obj in objs:
        resource = resource_of(obj["apiVersion"], obj["kind"])
        fake.store.create((resource.group, resource.plural), "team-a", obj)
    KubeWorkload.objects.filter(uid="svc-1").update(
        applied=[{"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"]} for o in objs]
    )
    run_controller()
    wait_for(lambda: KubeWorkload.objects.get(uid="svc-1").created, message="never adopted")
    (name,) = fake.sim.wait_created()
    assert len(fake.objects("apps", "deployments", "team-a")) == 1
    assert len(fake.objects("", "services", "team-a")) == 1
    assert len(fake.requests_to("POST", "/")) == len(objs)  # each create answered 409 and was adopted
    fake.sim.start(name)
    wait_for(lambda: row_state("svc-1") == "running")
    listener.wait_phases("svc-1", [Phase.RUNNING])


def test_a_foreign_object_of_the_same_name_fails_the_workload_and_nothing_of_it_stays(
    fake, cluster, listener, run_controller
):
    workload = mine(sample_service(), "svc-2")
    objs = build(workload, ClusterProfile.of(cluster, "team-a"))
    service = next(o for o in objs if o["kind"] == "Service")
    foreign = {**service, "metadata": {**service["metadata"], "labels": {"portal.io/workload": "someone-else"}}}
    fake.store.create(("", "services"), "team-a", foreign)
    run_controller()
    fresh_runtime().submit(workload)
    wait_for(lambda: row_state("svc-2") == "failed", message="never failed")
    row = KubeWorkload.objects.get(uid="svc-2")
    assert f"a Service named '{service['metadata']['name']}' already exists in namespace 'team-a'" in row.reason
    assert "'someone-else'" in row.reason
    assert not row.created
    assert row.applied == []  # nothing of it is left to delete (least of all the foreign Service)
    assert fake.objects("apps", "deployments", "team-a") == []  # created by this attempt, then deleted
    (kept,) = fake.objects("", "services", "team-a")
    assert kept["metadata"]["labels"] == {"portal.io/workload": "someone-else"}
    listener.wait_phases("svc-2", [Phase.FAILED])


def test_a_workload_the_cluster_cannot_run_fails_with_the_builders_reason(fake, cluster, listener, run_controller):
    Cluster.objects.filter(pk=cluster.pk).update(operators=[])
    run_controller()
    fresh_runtime().submit(mine(sample_distributed("pytorch"), "task-3"))
    wait_for(lambda: row_state("task-3") == "failed")
    reason = KubeWorkload.objects.get(uid="task-3").reason
    assert "needs the Kubeflow training operator" in reason
    assert "cluster 'fake'" in reason
    assert fake.requests_to("POST", "/") == []
    listener.wait_phases("task-3", [Phase.FAILED])  # the notice follows the row's change, on the notifier thread
    final = listener.changes[-1][2]
    assert final is not None
    assert final.phase == Phase.FAILED
    assert final.reason == reason


def test_an_invalid_manifest_fails_before_anything_is_created(fake, cluster, listener, run_controller):
    run_controller()
    broken = mine(sample_job(), "task-4", tolerations=[{"key": "gpu", "operator": "Exists", "effect": 7}])
    fresh_runtime().submit(broken)
    wait_for(lambda: row_state("task-4") == "failed")
    assert "tolerations" in KubeWorkload.objects.get(uid="task-4").reason
    assert fake.requests_to("POST", "/") == []


def test_a_refusal_fails_the_workload_and_deletes_what_was_created(fake, cluster, listener, run_controller):
    fake.faults.fail("POST", r"/services$", 403, message='services is forbidden: User "portal" cannot create')
    run_controller()
    fresh_runtime().submit(mine(sample_service(), "svc-5"))
    wait_for(lambda: row_state("svc-5") == "failed")
    assert "services is forbidden" in KubeWorkload.objects.get(uid="svc-5").reason
    assert fake.objects("apps", "deployments", "team-a") == []
    assert fake.objects("", "pods", "team-a") == []


def test_an_unreachable_cluster_leaves_the_workload_pending_saying_why_until_it_answers(
    fake, cluster, listener, run_controller
):
    fault = fake.faults.fail("POST", r"/jobs$", 503, times=12, message="etcd leader changed")
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-6"))
    wait_for(lambda: "etcd leader changed" in KubeWorkload.objects.get(uid="task-6").reason, timeout=30)
    row = KubeWorkload.objects.get(uid="task-6")
    assert row.state == "pending"
    assert row.reason.startswith("waiting for cluster fake:")
    wait_for(lambda: KubeWorkload.objects.get(uid="task-6").created, timeout=30, message="never created")
    assert fault.hits == 12
    assert len(fake.objects(*JOBS, "team-a")) == 1


def test_registry_credentials_become_the_pull_secret_the_pods_name(fake, cluster, listener, run_controller):
    image = Image.objects.create(
        name="registry.example.com/portal/tasks:1.4",
        registry="registry.example.com",
        registry_username="robot",
        registry_password="s3cret",
    )
    secret_name = registry_secret_name(image.pk)
    workload = mine(sample_job(), "task-7", image_pull_secrets=[secret_name])
    workload.labels = {LABEL: "task-7", "image": str(image.pk)}
    run_controller()
    fresh_runtime().submit(workload)
    wait_for(lambda: KubeWorkload.objects.get(uid="task-7").created)
    secret = fake.store.get(("", "secrets"), "team-a", secret_name)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    entry = config["auths"]["registry.example.com"]
    assert (entry["username"], entry["password"]) == ("robot", "s3cret")
    assert base64.b64decode(entry["auth"]).decode() == "robot:s3cret"
    (job,) = fake.objects(*JOBS, "team-a")
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": secret_name}]
    assert secret_name not in json.dumps(KubeWorkload.objects.get(uid="task-7").applied)  # shared, kept

    image.registry_password = "rotated"
    image.save()
    second = dataclasses.replace(workload, uid="task-8", labels={LABEL: "task-8", "image": str(image.pk)})
    fresh_runtime().submit(second)
    wait_for(lambda: KubeWorkload.objects.get(uid="task-8").created)
    secret = fake.store.get(("", "secrets"), "team-a", secret_name)
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config["auths"]["registry.example.com"]["password"] == "rotated"


def test_project_secrets_reach_the_pods_by_reference_from_a_secret_owned_by_the_job(
    fake, cluster, listener, run_controller
):
    """The value is in the workload's env Secret only (never in the Job or the database); the Job owns the Secret,
    so Kubernetes deletes it with the Job."""
    from apps.projects.secrets import create_secret
    from apps.runtime.kubernetes.manifests.meta import env_secret_name
    from tests.factories import ProjectFactory, UserFactory

    project = ProjectFactory(owner=UserFactory(), slug="demo")
    create_secret(project, project.created_by, name="HF_TOKEN", value="hf_abcdefghijklmnop")
    base = sample_job()
    workload = mine(base, "task-9", env={**base.env, "HF": "${secret:HF_TOKEN}"})
    run_controller()
    fresh_runtime().submit(workload)
    wait_for(lambda: KubeWorkload.objects.get(uid="task-9").created)

    (job,) = fake.objects(*JOBS, "team-a")
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    name = env_secret_name(workload)
    assert env["HF"] == {"name": "HF", "valueFrom": {"secretKeyRef": {"name": name, "key": "HF"}}}
    assert "hf_abcdefghijklmnop" not in json.dumps(job)
    secret = fake.store.get(("", "secrets"), "team-a", name)
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["HF"]).decode() == "hf_abcdefghijklmnop"
    assert list(secret["data"]) == ["HF"]  # only what the task references
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", job["metadata"]["name"], job["metadata"]["uid"])
    row = KubeWorkload.objects.get(uid="task-9")
    assert row.applied[0]["kind"] == "Job"
    assert row.applied[-1] == {"apiVersion": "v1", "kind": "Secret", "name": name}
    assert "hf_abcdefghijklmnop" not in json.dumps(row.spec)

    fresh_runtime().cancel("task-9")
    wait_for(lambda: not fake.objects(*JOBS, "team-a"), message="the job was not deleted")
    wait_for(lambda: fake.store.find(("", "secrets"), "team-a", name) is None, message="the env Secret stayed")


def test_a_secret_deleted_before_the_workload_is_applied_fails_it_with_the_name(
    fake, cluster, listener, run_controller
):
    from tests.factories import ProjectFactory, UserFactory

    ProjectFactory(owner=UserFactory(), slug="demo")  # has no secret HF_TOKEN (any more)
    base = sample_job()
    run_controller()
    fresh_runtime().submit(mine(base, "task-10", env={**base.env, "HF": "${secret:HF_TOKEN}"}))
    wait_for(lambda: row_state("task-10") == "failed")
    assert "HF_TOKEN" in KubeWorkload.objects.get(uid="task-10").reason
    assert fake.objects(*JOBS, "team-a") == []
    assert fake.objects("", "secrets", "team-a") == []
