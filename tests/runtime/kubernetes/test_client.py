"""The client of a Cluster row: built from its encrypted kubeconfig, cached until it changes, retrying what may
pass (429, 5xx, dropped connections) with backoff and nothing else, streams that report broken connections."""

from __future__ import annotations

import pytest
import yaml

from apps.runtime.kubernetes.client import (
    POD,
    KubeError,
    KubeUnavailable,
    RetryPolicy,
    client_for,
    with_retries,
)
from apps.runtime.kubernetes.manifests import Resource
from apps.runtime.models import Cluster

JOBS = Resource("batch/v1", "Job", "jobs")
FAST = RetryPolicy(attempts=4, base=0.01, cap=0.05)


def job(name: str = "train") -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "portal"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}},
    }


@pytest.fixture
def kube(cluster: Cluster):
    client = client_for(cluster)
    client.policy = FAST
    return client


def test_the_kubeconfig_of_the_row_reaches_the_server(fake, kube):
    kube.create(JOBS, "team-a", job())
    assert kube.get(JOBS, "team-a", "train")["metadata"]["namespace"] == "team-a"
    (_method, path, _query) = fake.requests_to("POST", "/jobs")[0]
    assert path == "/apis/batch/v1/namespaces/team-a/jobs"


def test_the_client_is_cached_until_the_kubeconfig_changes(fake, cluster):
    first = client_for(cluster)
    assert client_for(Cluster.objects.get(pk=cluster.pk)) is first
    cluster.kubeconfig = fake.kubeconfig(context="other")
    cluster.context = "other"
    cluster.save()
    second = client_for(Cluster.objects.get(pk=cluster.pk))
    assert second is not first
    assert second.version()["minor"] == "33"


def test_a_named_context_is_used_and_a_missing_one_is_a_clear_error(fake, cluster):
    config = yaml.safe_load(fake.kubeconfig(context="good"))
    config["contexts"].append({"name": "bad", "context": {"cluster": "nowhere", "user": "tester"}})
    cluster.kubeconfig, cluster.context = yaml.safe_dump(config), "good"
    cluster.save()
    assert client_for(cluster).version()["major"] == "1"
    cluster.context = "missing"
    with pytest.raises(KubeError, match="missing"):
        client_for(cluster)
    cluster.context, cluster.kubeconfig = "", "not: [valid"
    with pytest.raises(KubeError, match="not valid YAML"):
        client_for(cluster)


def test_500s_are_retried_until_the_call_succeeds(fake, kube):
    kube.create(JOBS, "team-a", job())
    fault = fake.faults.fail("GET", r"/jobs/train$", 500, times=2)
    assert kube.get(JOBS, "team-a", "train")["metadata"]["name"] == "train"
    assert fault.hits == 2
    assert len(fake.requests_to("GET", "/jobs/train")) == 3


def test_429_waits_at_least_what_retry_after_says(fake, kube):
    fake.faults.fail("GET", r"/pods$", 429, retry_after=0.4)
    waits: list[float] = []
    kube.sleep = waits.append
    assert kube.list(POD, "team-a")[0] == []
    assert len(waits) == 1
    assert waits[0] >= 0.4


def test_dropped_connections_are_retried(fake, kube):
    fault = fake.faults.drop("GET", r"/pods$", times=2)
    assert kube.list(POD, "team-a") == ([], kube.list(POD, "team-a")[1])
    assert fault.hits == 2


def test_a_create_whose_answer_was_lost_comes_back_as_409(fake, kube):
    """The first POST reached the server but its answer did not: the retry finds the object (409), which the
    controller then adopts — never a second object."""
    kube.create(JOBS, "team-a", job())
    fake.faults.drop("POST", r"/jobs$")
    with pytest.raises(KubeError) as caught:
        kube.create(JOBS, "team-a", job())
    assert caught.value.conflict
    assert len(fake.objects("batch", "jobs", "team-a")) == 1


def test_other_4xx_are_not_retried(fake, kube):
    with pytest.raises(KubeError) as caught:
        kube.get(JOBS, "team-a", "nope")
    assert caught.value.status == 404
    assert caught.value.reason == "NotFound"
    assert len(fake.requests_to("GET", "/jobs/nope")) == 1
    fake.faults.fail("POST", r"/jobs$", 422, message="spec.template: Required value")
    with pytest.raises(KubeError, match=r"spec\.template: Required value") as caught:
        kube.create(JOBS, "team-a", job())
    assert caught.value.status == 422
    assert not isinstance(caught.value, KubeUnavailable)
    assert len(fake.requests_to("POST", "/jobs")) == 1


def test_attempts_are_bounded(fake, kube):
    fake.faults.fail("GET", r"/pods$", 503, times=10)
    with pytest.raises(KubeUnavailable, match="gave up after 4 attempts") as caught:
        kube.list(POD, "team-a")
    assert caught.value.status == 503
    assert len(fake.requests_to("GET", "/pods")) == 4


def test_an_unreachable_cluster_is_unavailable(cluster):
    config = yaml.safe_load(cluster.kubeconfig)
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # discard port: nothing listens
    cluster.kubeconfig = yaml.safe_dump(config)
    client = client_for(cluster)
    client.policy = FAST
    with pytest.raises(KubeUnavailable, match="cannot reach the cluster"):
        client.version()


def test_backoff_grows_and_is_capped():
    policy = RetryPolicy(base=1, cap=8)
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (8, 8)]:
        delays = [policy.delay(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert policy.delay(1, retry_after=100) == policy.max_retry_after


def test_a_watch_reports_a_broken_connection(fake, kube):
    kube.create(JOBS, "team-a", job())
    _items, version = kube.list(JOBS, "team-a")
    fake.faults.cut_watch(r"/jobs$", after=1)
    events = []
    with pytest.raises(KubeUnavailable, match="connection broke"):  # noqa: PT012 — events before the break count
        for event in kube.watch(JOBS, "team-a", "0", timeout_seconds=5):
            events.append(event)
    assert [e["type"] for e in events] == ["ADDED"]
    fake.sim.start("train")  # changes after `version`, which compaction then forgets
    fake.store.compact()
    with pytest.raises(KubeError) as caught:
        list(kube.watch(JOBS, "team-a", version, timeout_seconds=5))
    assert caught.value.gone


def test_with_retries_gives_up_on_what_never_passes():
    calls = []

    def refuse() -> None:
        calls.append(1)
        raise ConnectionResetError("reset by peer")

    with pytest.raises(KubeUnavailable, match="reset by peer"):
        with_retries(refuse, "calling", FAST, sleep=lambda _s: None)
    assert len(calls) == FAST.attempts
