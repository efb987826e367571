"""Dry run: the Kubernetes objects a pipeline's run would create, from the command, the page and the API."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client

from apps.accounts.models import ApiToken
from apps.datasets import demo as datasets_demo
from apps.jobs import demo as jobs_demo
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import PipelineRun, TaskRun
from apps.jobs.services import save_pipeline
from apps.runtime.kubernetes.manifests import LABEL_UID
from apps.runtime.kubernetes.validation import validate_all
from apps.runtime.models import KubeWorkload
from tests.conftest import user_client
from tests.runtime.factories import ClusterFactory, bind

pytestmark = pytest.mark.django_db


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture
def iris(world):
    """The demo's iris pipeline and what it reads (its templates and dataset), not the whole demo: the rest of it
    (training the tracking example's models, the knowledge base) is not rendered here and cost seconds per test."""
    jobs_demo.builtin_templates(world.project_a, world.alice)
    datasets_demo.populate(world.project_a, world.alice)
    return jobs_demo.iris_pipeline(world.project_a, world.alice)


@pytest.fixture
def cluster(world):
    cluster = ClusterFactory(name="lab", version="1.33", work_volume_claim="portal-work")
    bind(cluster, world.project_a, namespace="team-a", is_default=True)
    return cluster


def env_of(obj: dict) -> dict[str, str]:
    container = obj["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value") for item in container.get("env", [])}


def test_the_demo_pipeline_becomes_one_valid_job_per_node_and_nothing_is_created(iris, cluster):
    out = StringIO()
    call_command("pipeline_manifests", "project-a/iris", stdout=out)

    objects = documents(out.getvalue())
    assert [obj["kind"] for obj in objects] == ["Job"] * 5
    validate_all(objects, "1.33")
    assert {obj["metadata"]["namespace"] for obj in objects} == {"team-a"}
    assert len({obj["metadata"]["labels"][LABEL_UID] for obj in objects}) == 5  # one workload per node
    train = next(obj for obj in objects if env_of(obj)["PORTAL_TASK"] == "train")
    env = env_of(train)
    assert env["PORTAL_API_TOKEN"] == env["MLFLOW_TRACKING_TOKEN"] == "<issued when the task starts>"
    assert env["PORTAL_INPUT_SPLIT"].endswith("/split/attempt-1")
    assert train["spec"]["template"]["spec"]["containers"][0]["image"] == "mlops-portal:dev"  # {portal}
    assert "# node: train" in out.getvalue()
    # A dry run: no run, no attempt, no token, no workload.
    assert not PipelineRun.objects.exists()
    assert not TaskRun.objects.exists()
    assert not ApiToken.objects.exists()
    assert not KubeWorkload.objects.exists()


def test_on_a_cluster_with_the_portals_priority_classes_the_pods_name_the_runs(iris, cluster):
    cluster.priority_classes = True
    cluster.save(update_fields=["priority_classes"])
    spec = dict(iris.spec, priority=2)
    save_pipeline(iris.project, iris.created_by, name=iris.name, spec=spec, pipeline=iris)
    out = StringIO()
    call_command("pipeline_manifests", "project-a/iris", stdout=out)

    objects = documents(out.getvalue())
    validate_all(objects, "1.33")
    assert {obj["spec"]["template"]["spec"]["priorityClassName"] for obj in objects} == {"portal-priority-2"}


def test_a_project_secret_shows_as_the_secret_key_ref_the_pod_will_have_never_its_value(world, cluster):
    from apps.projects.secrets import create_secret
    from apps.runtime.kubernetes.manifests.meta import env_secret_name

    load_builtin_templates()
    create_secret(world.project_a, world.alice, name="HF_TOKEN", value="hf_abcdefghijklmnop")
    save_pipeline(
        world.project_a,
        world.alice,
        name="uses-secret",
        spec={"nodes": [{"name": "fit", "template": "python", "args": {"code": "pass"},
                         "env": {"HF_TOKEN": "${secret:HF_TOKEN}"}}]},
    )  # fmt: skip
    out = StringIO()
    call_command("pipeline_manifests", "project-a/uses-secret", stdout=out)

    assert "hf_abcdefghijklmnop" not in out.getvalue()
    [job] = documents(out.getvalue())
    validate_all([job], "1.33")
    [entry] = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "HF_TOKEN"]
    name = env_secret_name(job["metadata"]["name"])
    assert entry == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": "HF_TOKEN"}}}


def test_the_dataset_argument_points_at_its_pinned_version_on_the_shared_folder(iris, cluster, settings):
    out = StringIO()
    call_command("pipeline_manifests", "project-a/iris", "--cluster", "lab", stdout=out)

    load = next(obj for obj in documents(out.getvalue()) if env_of(obj)["PORTAL_TASK"] == "load")
    command = load["spec"]["template"]["spec"]["containers"][0]
    argv = command.get("command", []) + command.get("args", [])
    dataset_dir = argv[argv.index("--dataset") + 1]
    assert dataset_dir.startswith(str(settings.PORTAL_WORK_DIR / "datasets")), argv
    mounts = {m["mountPath"]: m["name"] for m in command["volumeMounts"]}
    assert str(settings.PORTAL_WORK_DIR) in mounts  # the work claim holds outputs and materialized datasets


def test_a_distributed_node_on_a_cluster_without_the_operator_is_named_and_the_command_fails(world, cluster):
    load_builtin_templates()
    save_pipeline(
        world.project_a,
        world.alice,
        name="ddp",
        spec={"nodes": [{"name": "fit", "template": "pytorch-ddp-train", "args": {}}]},
    )
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 node"):
        call_command("pipeline_manifests", "project-a/ddp", stdout=out, stderr=err)
    assert "fit:" in err.getvalue()
    assert "needs the Kubeflow training operator" in err.getvalue()

    cluster.operators = ["training-operator"]
    cluster.save()
    out = StringIO()
    call_command("pipeline_manifests", "project-a/ddp", stdout=out)
    [job] = documents(out.getvalue())
    assert job["kind"] == "PyTorchJob"
    validate_all([job], "1.33")


def test_the_command_names_what_it_cannot_find(iris, cluster):
    with pytest.raises(CommandError, match="project-slug/pipeline-name"):
        call_command("pipeline_manifests", "iris")
    with pytest.raises(CommandError, match="no pipeline 'nope'"):
        call_command("pipeline_manifests", "project-a/nope")
    with pytest.raises(CommandError, match=r"no cluster 'far' \(registered: lab\)"):
        call_command("pipeline_manifests", "project-a/iris", "--cluster", "far")


def test_the_page_shows_the_yaml_for_a_chosen_cluster_and_offers_it_as_a_download(iris, cluster, world):
    other = ClusterFactory(name="gpu-farm")
    bind(other, world.project_a, namespace="ml")
    client = Client()
    client.force_login(world.bob)  # an editor; viewers may look too
    url = f"/p/project-a/pipelines/{iris.pk}/manifests/"

    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "kind: Job" in html
    assert "namespace: team-a" in html
    assert '<option value="gpu-farm"' in html

    chosen = client.get(url, {"cluster": "gpu-farm"})
    assert "namespace: ml" in chosen.content.decode()

    download = client.get(url, {"cluster": "gpu-farm", "download": "1"})
    assert download["Content-Type"] == "application/yaml"
    assert "iris-gpu-farm.yaml" in download["Content-Disposition"]
    assert len(documents(download.content.decode())) == 5

    unknown = client.get(url, {"cluster": "somewhere"})
    assert unknown.status_code == 400
    assert "choose one of: lab, gpu-farm" in unknown.content.decode()


def test_the_page_says_when_no_cluster_is_registered(iris, world):
    client = Client()
    client.force_login(world.alice)

    page = client.get(f"/p/project-a/pipelines/{iris.pk}/manifests/")

    assert page.status_code == 200
    assert "no Kubernetes cluster is registered" in page.content.decode()


def test_the_api_answers_yaml_and_hides_other_projects_pipelines(iris, cluster, world):
    response = user_client(world.bob).get(f"/api/v1/pipelines/{iris.pk}/manifests/", {"cluster": "lab"})
    assert response.status_code == 200
    assert [obj["kind"] for obj in documents(response.content.decode())] == ["Job"] * 5

    bad = user_client(world.bob).get(f"/api/v1/pipelines/{iris.pk}/manifests/", {"cluster": "far"})
    assert bad.status_code == 400
    assert "far" in bad.json()["cluster"][0]

    assert user_client(world.charlie).get(f"/api/v1/pipelines/{iris.pk}/manifests/").status_code == 404


def loopback_or_checkout(env: dict[str, str]) -> dict[str, str]:
    from django.conf import settings

    return {
        key: value
        for key, value in env.items()
        if value and ("127.0.0.1" in value or "localhost" in value or str(settings.BASE_DIR) in value)
    }


def test_manifests_carry_the_cluster_facing_url_and_no_checkout_path(iris, cluster, settings):
    settings.SITE_URL = "http://127.0.0.1:8123"  # a portal on this host's loopback, on another port than 8000
    settings.PORTAL_CLUSTER_URL = "http://portal.mlops.svc:8000/"
    out, err = StringIO(), StringIO()
    call_command("pipeline_manifests", "project-a/iris", stdout=out, stderr=err)

    objects = documents(out.getvalue())
    for obj in objects:
        env = env_of(obj)
        assert loopback_or_checkout(env) == {}
        assert env["MLFLOW_TRACKING_URI"] == "http://portal.mlops.svc:8000"
        assert env["PORTAL_API_URL"] == "http://portal.mlops.svc:8000/api/v1/"
        assert "PYTHONPATH" not in env  # the image's own (PYTHONPATH=/app), never this checkout
    assert "warning" not in out.getvalue() + err.getvalue()


def test_without_a_cluster_url_the_dry_run_warns_and_the_pods_get_no_loopback_url(iris, cluster, settings, world):
    settings.SITE_URL = "http://127.0.0.1:8123"
    settings.PORTAL_CLUSTER_URL = ""
    out, err = StringIO(), StringIO()
    call_command("pipeline_manifests", "project-a/iris", stdout=out, stderr=err)

    for obj in documents(out.getvalue()):
        env = env_of(obj)
        assert loopback_or_checkout(env) == {}
        assert "MLFLOW_TRACKING_URI" not in env
        assert "PORTAL_API_URL" not in env
    warning = "PORTAL_CLUSTER_URL is not set and SITE_URL (http://127.0.0.1:8123) is a loopback address"
    assert warning in err.getvalue()
    assert f"# warning: {warning}" in out.getvalue()  # the YAML (download, API) says it too

    client = Client()
    client.force_login(world.bob)
    page = client.get(f"/p/project-a/pipelines/{iris.pk}/manifests/").content.decode()
    assert "data-dry-run-warning>PORTAL_CLUSTER_URL is not set" in page


def test_a_public_site_url_serves_the_pods_when_no_cluster_url_is_set(iris, cluster, settings):
    settings.SITE_URL = "https://portal.example.org"
    settings.PORTAL_CLUSTER_URL = ""
    out, err = StringIO(), StringIO()
    call_command("pipeline_manifests", "project-a/iris", stdout=out, stderr=err)

    env = env_of(documents(out.getvalue())[0])
    assert env["MLFLOW_TRACKING_URI"] == "https://portal.example.org"
    assert err.getvalue() == ""
