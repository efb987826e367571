"""The fake API server behaves as the real one does where the runtime relies on it, as seen by the official
client (the tests of the runtime are only as good as this)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import new_client_from_config, new_client_from_config_dict
from urllib3.exceptions import ProtocolError

from tests.runtime.kubernetes.fakeapi import FakeKube
from tests.runtime.kubernetes.fakeapi.store import label_matcher, parse_time_ns, rfc3339_nano

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "labels": {"app": "portal", "tier": "gpu"}},
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "portal"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
        }
    },
}


@pytest.fixture
def api(fake: FakeKube) -> k8s.ApiClient:
    """The official client, configured from the fake's kubeconfig (as `kubectl` would be)."""
    return new_client_from_config_dict(yaml.safe_load(fake.kubeconfig()), persist_config=False)


def test_a_kubeconfig_file_points_the_client_at_it(fake, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(fake.kubeconfig(context="ci"))
    api = new_client_from_config(config_file=str(path), persist_config=False)
    assert api.configuration.host == fake.url
    assert k8s.CoreV1Api(api).list_namespaced_pod("team-a").items == []
    assert fake.requests_to("GET", "/api/v1/namespaces/team-a/pods")


def test_the_official_typed_client_creates_lists_and_reads(fake, api):
    batch = k8s.BatchV1Api(api)
    created = batch.create_namespaced_job("team-a", JOB)
    assert created.metadata.uid
    assert int(created.metadata.resource_version) > 100
    jobs = batch.list_namespaced_job("team-a", label_selector="tier=gpu")
    assert [j.metadata.name for j in jobs.items] == ["train"]
    assert int(jobs.metadata.resource_version) >= int(created.metadata.resource_version)
    assert batch.list_namespaced_job("team-a", label_selector="tier!=gpu").items == []
    assert batch.list_namespaced_job("other").items == []
    # The simulated job controller made its pod, labelled as the real one labels it.
    pods = k8s.CoreV1Api(api).list_namespaced_pod("team-a", label_selector="job-name=train").items
    assert len(pods) == 1
    assert pods[0].metadata.owner_references[0].uid == created.metadata.uid


def test_a_second_create_answers_409_already_exists_with_a_status(fake, api):
    batch = k8s.BatchV1Api(api)
    batch.create_namespaced_job("team-a", JOB)
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job("team-a", JOB)
    body = json.loads(caught.value.body)
    assert caught.value.status == 409
    assert body["kind"] == "Status"
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'jobs.batch "train" already exists'


def test_requests_without_the_kubeconfig_token_are_refused(fake):
    stranger = new_client_from_config_dict(yaml.safe_load(fake.kubeconfig(token="wrong")), persist_config=False)
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(stranger).list_namespaced_pod("team-a")
    assert caught.value.status == 401


def test_label_selectors_cover_the_set_based_forms():
    match = label_matcher("app=portal,tier in (gpu, cpu),!legacy,zone notin (b),role")
    assert match({"app": "portal", "tier": "gpu", "zone": "a", "role": "x"})
    assert not match({"app": "portal", "tier": "gpu", "zone": "b", "role": "x"})
    assert not match({"app": "portal", "tier": "gpu", "role": "x", "legacy": "1"})
    assert not match({"app": "portal", "tier": "tpu", "role": "x"})


def test_a_watch_resumes_from_a_version_and_answers_410_once_it_is_compacted(fake, api):
    batch = k8s.BatchV1Api(api)
    first = batch.create_namespaced_job("team-a", JOB)
    version = first.metadata.resource_version
    fake.sim.start("train")
    fake.sim.succeed("train")
    events = []
    response = batch.list_namespaced_job(
        "team-a", watch=True, resource_version=version, timeout_seconds=1, _preload_content=False
    )
    for line in response.read().decode().splitlines():
        events.append(json.loads(line))
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "MODIFIED"]  # created-status, running, succeeded
    assert events[-1]["object"]["status"]["conditions"][-1]["type"] == "Complete"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(version)

    fake.store.compact()
    response = batch.list_namespaced_job(
        "team-a", watch=True, resource_version=version, timeout_seconds=1, _preload_content=False
    )
    (error,) = [json.loads(line) for line in response.read().decode().splitlines()]
    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 410


def test_foreground_delete_takes_the_pods_and_the_jobs_default_orphans_them(fake, api):
    batch, core = k8s.BatchV1Api(api), k8s.CoreV1Api(api)
    batch.create_namespaced_job("team-a", JOB)
    batch.delete_namespaced_job("train", "team-a", body={"propagationPolicy": "Foreground"})
    assert core.list_namespaced_pod("team-a").items == []
    batch.create_namespaced_job("team-a", JOB)
    batch.delete_namespaced_job("train", "team-a")  # the API server's default for batch/v1 Jobs: orphan
    assert len(core.list_namespaced_pod("team-a").items) == 1


def test_pod_logs_follow_with_timestamps_and_since_time(fake, api):
    core = k8s.CoreV1Api(api)
    k8s.BatchV1Api(api).create_namespaced_job("team-a", JOB)
    (pod,) = fake.sim.pod_names("train")
    with pytest.raises(ApiException) as caught:  # not started: no log yet
        core.read_namespaced_pod_log(pod, "team-a")
    assert caught.value.status == 400
    assert "waiting to start" in json.loads(caught.value.body)["message"]
    fake.sim.start("train")
    fake.sim.log("train", pod, ["one", "two"])
    lines: list[str] = []

    def follow() -> None:
        response = core.read_namespaced_pod_log(pod, "team-a", follow=True, timestamps=True, _preload_content=False)
        lines.extend(response.read().decode().splitlines())

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.2)
    fake.sim.log("train", pod, ["three"])
    fake.sim.succeed("train")  # the container ends: the followed stream ends
    reader.join(5)
    assert [line.split(" ", 1)[1] for line in lines] == ["one", "two", "three"]
    third = lines[2].split(" ", 1)[0]
    assert parse_time_ns(third) > parse_time_ns(lines[1].split(" ", 1)[0])
    since = core.read_namespaced_pod_log(pod, "team-a", timestamps=True, _preload_content=False)
    assert len(since.read().decode().splitlines()) == 3
    path = f"/api/v1/namespaces/team-a/pods/{pod}/log"
    response = api.call_api(
        path, "GET", query_params=[("sinceTime", third)], auth_settings=["BearerToken"], _preload_content=False
    )
    assert response.read().decode().splitlines() == ["three"]


def test_go_style_timestamps_round_trip():
    assert rfc3339_nano(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert parse_time_ns("2023-11-14T22:13:20.12Z") == 1_700_000_000_120_000_000
    assert parse_time_ns("2023-11-14T22:13:20Z") == 1_700_000_000_000_000_000


def test_faults_answer_statuses_and_drop_connections(fake, api):
    api.configuration.retries = False  # urllib3 would otherwise honour the Retry-After by itself
    core = k8s.CoreV1Api(k8s.ApiClient(api.configuration))
    fake.faults.fail("GET", r"/pods$", 429, retry_after=2)
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("team-a")
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "2"
    assert core.list_namespaced_pod("team-a").items == []  # used up
    drop = fake.faults.drop("GET", r"/pods$")
    with pytest.raises(ProtocolError):
        core.list_namespaced_pod("team-a")
    assert drop.hits == 1


def test_a_watch_can_be_cut_mid_stream(fake, api):
    batch = k8s.BatchV1Api(api)
    batch.create_namespaced_job("team-a", JOB)
    fake.faults.cut_watch(r"/jobs$", after=1)
    api.configuration.retries = False
    response = k8s.BatchV1Api(k8s.ApiClient(api.configuration)).list_namespaced_job(
        "team-a", watch=True, timeout_seconds=5, _preload_content=False
    )
    received: list[bytes] = []

    def read() -> None:
        received.extend(response.stream(amt=None, decode_content=False))

    with pytest.raises(ProtocolError):
        read()
    assert json.loads(received[0])["type"] == "ADDED"


def test_the_simulator_reports_failures_as_the_kubelet_does(fake, api):
    k8s.BatchV1Api(api).create_namespaced_job("team-a", JOB)
    fake.sim.unschedulable("train", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    (pod,) = k8s.CoreV1Api(api).list_namespaced_pod("team-a").items
    condition = pod.status.conditions[0]
    assert (condition.type, condition.status, condition.reason) == ("PodScheduled", "False", "Unschedulable")
    events = (
        k8s.CoreV1Api(api)
        .list_namespaced_event(
            "team-a", field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod.metadata.name}"
        )
        .items
    )
    assert [(e.reason, e.source.component) for e in events] == [("FailedScheduling", "default-scheduler")]
    fake.sim.evict("train")
    pod = k8s.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, "team-a")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")
    job = k8s.BatchV1Api(api).read_namespaced_job("train", "team-a")
    assert job.status.conditions[-1].type == "Failed"


def test_nodes_are_cluster_scoped(fake, api):
    fake.add_node("gpu-1", gpu=4, labels={"gpu-type": "A100"})
    (node,) = k8s.CoreV1Api(api).list_node().items
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert node.metadata.labels["gpu-type"] == "A100"


def test_the_client_sees_the_servers_version(fake, api):
    info = k8s.VersionApi(api).get_code()
    assert (info.major, info.minor) == ("1", "33")
    assert SimpleNamespace(**fake.version_info()).gitVersion == "v1.33.0"
