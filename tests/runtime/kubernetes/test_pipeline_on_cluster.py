"""Pipelines of a project that runs on Kubernetes, end to end: the orchestrator places each task on the project's
cluster, the controller creates its objects on the (in-test) API and follows them, and the run goes green with
every replica's log stored like the local runtime's."""

from __future__ import annotations

import base64

import pytest

from apps.console.demo import populate
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.dispatcher import TOKEN_PLACEHOLDER
from apps.jobs.models import LogLine, Pipeline, RunStatus, TaskStatus
from apps.jobs.services import save_pipeline, start_run
from apps.models import services
from apps.runtime.models import Cluster, KubeWorkload
from apps.runtime.tasks import kube_refresh_inventory
from tests.factories import ProjectFactory, UserFactory, experiment
from tests.jobs.conftest import drive
from tests.runtime.factories import bind
from tests.runtime.kubernetes.conftest import wait_for
from tests.runtime.kubernetes.fakeapi.simulator import image_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def project(cluster, fake):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="vision")
    project.runtime = "kubernetes"
    project.save(update_fields=["runtime"])
    bind(cluster, project, namespace="vision", is_default=True)
    fake.add_node("node-1", cpu="16", memory="64Gi")
    return project


def wait_for_inventory(cluster) -> None:
    """What beat's inventory task has stored by the time a task is dispatched (its body, run here)."""
    assert kube_refresh_inventory(cluster.pk) == "refreshed"
    assert Cluster.objects.get(pk=cluster.pk).inventory["nodes"]


@pytest.fixture
def controller(cluster, run_controller) -> None:
    """The controller running, once it has taken the cluster's inventory (what placing a task needs). A test that
    arranges the cluster's nodes or bindings first starts it itself, after them."""
    run_controller()
    wait_for_inventory(cluster)


@pytest.fixture
def make_pipeline(project):
    """`make_pipeline(name, *nodes)`: a pipeline of the project from the built-in templates."""
    load_builtin_templates()

    def make(name: str, *nodes: dict) -> Pipeline:
        return save_pipeline(project, project.created_by, name=name, spec={"nodes": list(nodes)})

    return make


FIT = {"name": "fit", "template": "python", "args": {"code": "pass"}}


def test_the_demo_pipeline_runs_green_on_the_cluster_with_each_tasks_log(project, fake, controller):
    fake.sim.autopilot(outcome="succeeded", lines=3, delay=0.02)
    pipeline = populate(project, project.created_by)

    run = drive(start_run(pipeline, project.created_by), timeout=90)

    assert run.status == RunStatus.SUCCEEDED, run.reason
    tasks = {t.node: t for t in run.tasks.select_related("api_token")}
    assert set(tasks) == {"load", "split", "train", "evaluate", "register"}
    assert all(t.status == TaskStatus.SUCCEEDED and t.runtime == "kubernetes" for t in tasks.values())
    rows = KubeWorkload.objects.filter(uid__in=[t.handle for t in tasks.values()])
    assert {(r.cluster.name, r.namespace, r.state) for r in rows} == {("fake", "vision", "succeeded")}
    # Each task's pod printed three lines; the controller followed them into the run's log store.
    for task in tasks.values():
        texts = list(LogLine.objects.filter(task=task).order_by("seq").values_list("text", flat=True))
        assert len(texts) == 3, (task.node, texts)
        assert texts[0].endswith("line 0")
    jobs = fake.objects("batch", "jobs", "vision")
    assert len(jobs) == 5
    env = {e["name"]: e.get("value") for e in jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PORTAL_PROJECT"] == "vision"
    assert env["PORTAL_API_TOKEN"] != TOKEN_PLACEHOLDER  # a real token, limited to the project…
    assert all(t.api_token.project_id == project.pk for t in tasks.values())
    assert all(t.api_token.revoked_at is not None for t in tasks.values())  # …and revoked once the task ended


def test_a_task_records_the_digest_of_the_image_its_pod_ran(project, fake, controller, make_pipeline):
    fake.sim.autopilot(outcome="succeeded", lines=1, delay=0.02)
    pipeline = make_pipeline("one", FIT)

    run = drive(start_run(pipeline, project.created_by), timeout=60)

    assert run.status == RunStatus.SUCCEEDED, run.reason
    [task] = run.tasks.all()
    [job] = fake.objects("batch", "jobs", "vision")
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert task.image_digest == image_id(image)
    assert "@sha256:" in task.image_digest


def test_the_tracked_run_of_a_task_gets_the_image_digest_once_the_pod_ran(project, fake, controller, make_pipeline):
    pipeline = make_pipeline("one", FIT)
    run = drive(start_run(pipeline, project.created_by), until=lambda r: fake.sim.workloads)
    [task] = run.tasks.all()
    [name] = fake.sim.workloads
    # Created before the pod started (the image is not resolved yet): the tag comes when it is.
    early = services.create_run(experiment(project, "exp"), user=project.created_by, source_task=task)
    assert "portal.image.digest" not in dict(early.tags.values_list("key", "value"))

    fake.sim.start(name)
    task = wait_for(lambda: run.tasks.exclude(image_digest="").first(), message="no digest recorded")

    [job] = fake.objects("batch", "jobs", "vision")
    digest = image_id(job["spec"]["template"]["spec"]["containers"][0]["image"])
    assert task.image_digest == digest
    assert dict(early.tags.values_list("key", "value"))["portal.image.digest"] == digest
    # Created once it is known: the tag is there from the start.
    late = services.create_run(experiment(project, "exp"), user=project.created_by, source_task=task)
    assert dict(late.tags.values_list("key", "value"))["portal.image.digest"] == digest
    fake.sim.succeed(name)
    assert drive(run).status == RunStatus.SUCCEEDED


def test_a_distributed_node_streams_the_log_of_every_replica(project, fake, controller, make_pipeline):
    fake.sim.autopilot(outcome="succeeded", lines=2, delay=0.02)
    pipeline = make_pipeline("ddp", {"name": "fit", "template": "pytorch-ddp-train", "args": {}})

    run = drive(start_run(pipeline, project.created_by), timeout=60)

    assert run.status == RunStatus.SUCCEEDED, run.reason
    [task] = run.tasks.all()
    replicas = set(LogLine.objects.filter(task=task).values_list("replica", flat=True))
    assert replicas == {"master-0", "worker-0"}, replicas  # {worker: 2} = a master and one worker
    [job] = fake.objects("kubeflow.org", "pytorchjobs", "vision")
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}


def test_a_task_waits_with_a_reason_when_the_cluster_has_no_room(project, cluster, fake, run_controller, make_pipeline):
    fake.sim.autopilot(outcome="succeeded", lines=1, delay=0.02)
    # The cluster has 2 GPUs (a node may ask for them), all held by another team's pod.
    fake.add_node("gpu-1", gpu=2)
    busy = {"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    fake.store.create(
        ("", "pods"),
        "other",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy", "namespace": "other"},
            "spec": {"nodeName": "gpu-1", "containers": [busy]},
            "status": {"phase": "Running"},
        },
    )
    run_controller()
    wait_for_inventory(cluster)
    pipeline = make_pipeline("big", {**FIT, "resources": {"gpu": 2}})

    run = drive(start_run(pipeline, project.created_by), until=lambda r: r.tasks.filter(waiting_reason__gt="").exists())

    [task] = run.tasks.all()
    assert task.status == TaskStatus.WAITING
    assert task.waiting_reason == "waiting for 2 GPUs — 0 of 2 free on cluster fake"
    assert not KubeWorkload.objects.exists()


def test_a_task_goes_to_the_first_bound_cluster_with_room(project, cluster, fake, run_controller, make_pipeline):
    """Two clusters over the same API, told apart by their node selectors: the default one has CPUs only, so a
    GPU task goes to the other, in that binding's namespace."""
    cluster.node_selector = {"pool": "cpu"}
    cluster.save(update_fields=["node_selector"])
    gpus = Cluster.objects.create(
        name="gpus", kubeconfig=cluster.kubeconfig, node_selector={"pool": "gpu"}, operators=cluster.operators
    )
    bind(gpus, project, namespace="vision-gpu")
    fake.store.delete(("", "nodes"), "", "node-1")
    fake.add_node("cpu-1", cpu="16", memory="64Gi", labels={"pool": "cpu"})
    fake.add_node("gpu-1", cpu="16", memory="64Gi", gpu=4, labels={"pool": "gpu"})
    fake.sim.autopilot(outcome="succeeded", lines=1, delay=0.02)
    run_controller()
    wait_for_inventory(cluster)
    wait_for_inventory(gpus)
    pipeline = make_pipeline("mixed", {**FIT, "name": "prep"}, {**FIT, "resources": {"gpu": 1}})

    run = drive(start_run(pipeline, project.created_by), timeout=60)

    assert run.status == RunStatus.SUCCEEDED, run.reason
    placed = {
        t.node: KubeWorkload.objects.values_list("cluster__name", "namespace").get(uid=t.handle)
        for t in run.tasks.all()
    }
    assert placed == {"prep": ("fake", "vision"), "fit": ("gpus", "vision-gpu")}
    [fit_job] = fake.objects("batch", "jobs", "vision-gpu")
    pod = fit_job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")


def test_a_project_secret_reaches_the_pod_from_a_secret_and_is_masked_in_its_log(
    project, fake, controller, make_pipeline
):
    """The Job's env names the workload's env Secret (secretKeyRef); the value is in that Secret only, and a pod
    that prints it is stored as `***`."""
    from apps.projects.secrets import create_secret
    from apps.runtime.kubernetes.manifests.meta import env_secret_name

    create_secret(project, project.created_by, name="HF_TOKEN", value="hf_abcdefghijklmnop")
    pipeline = make_pipeline("needs-secret", {**FIT, "env": {"HF_TOKEN": "${secret:HF_TOKEN}"}})
    run = start_run(pipeline, project.created_by)
    drive(run, timeout=30, until=lambda r: KubeWorkload.objects.filter(created=True).exists())
    (name,) = fake.sim.wait_created()
    [job] = fake.objects("batch", "jobs", "vision")
    [container] = job["spec"]["template"]["spec"]["containers"]
    [entry] = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    secret_name = env_secret_name(KubeWorkload.objects.get().uid)
    assert entry == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "HF_TOKEN"}}}
    assert "hf_abcdefghijklmnop" not in str(job)
    secret = fake.store.get(("", "secrets"), "vision", secret_name)
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == "hf_abcdefghijklmnop"

    fake.sim.start(name)
    fake.sim.log(name, fake.sim.pod_names(name)[0], ["token is hf_abcdefghijklmnop", "done"])
    fake.sim.succeed(name)
    run = drive(run, timeout=30)

    assert run.status == RunStatus.SUCCEEDED, run.reason
    [task] = run.tasks.all()
    texts = list(LogLine.objects.filter(task=task).order_by("seq").values_list("text", flat=True))
    assert texts == ["token is ***", "done"]


def test_the_tasks_api_token_reaches_the_pod_from_its_secret_and_is_stored_nowhere(
    project, fake, controller, make_pipeline
):
    """Issue 27: PORTAL_API_TOKEN / MLFLOW_TRACKING_TOKEN are secretKeyRefs to the workload's env Secret, which holds
    the token; the Job and the stored workload hold only a sealed reference, the tokens table only the digest."""
    from apps.accounts.models import ApiToken, hash_token
    from apps.runtime.kubernetes.manifests.meta import env_secret_name
    from portal.lib import sealed

    pipeline = make_pipeline("token", FIT)
    run = start_run(pipeline, project.created_by)
    drive(run, timeout=30, until=lambda r: KubeWorkload.objects.filter(created=True).exists())
    fake.sim.wait_created()
    [job] = fake.objects("batch", "jobs", "vision")
    [container] = job["spec"]["template"]["spec"]["containers"]
    row = KubeWorkload.objects.get()
    secret_name = env_secret_name(row.uid)
    secret = fake.store.get(("", "secrets"), "vision", secret_name)
    token = ApiToken.objects.get(pk=run.tasks.get().api_token_id)

    for name in ("PORTAL_API_TOKEN", "MLFLOW_TRACKING_TOKEN"):
        [entry] = [e for e in container["env"] if e["name"] == name]
        assert entry == {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": name}}}
        raw = base64.b64decode(secret["data"][name]).decode()
        assert hash_token(raw) == token.digest
        assert sealed.is_reference(row.spec["env"][name])
        assert raw not in str(job)
        assert raw not in str(row.spec)
