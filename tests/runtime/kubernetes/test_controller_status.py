"""The controller's reading of pods (status.py), from realistic pod and Event dicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apps.runtime.kubernetes.status import event_reason, failure, observe, waiting_problem
from apps.runtime.workload import Phase

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
IMAGE = "registry.example.com/team/train:2"


def pod(name="p", phase="Pending", *, conditions=(), containers=(), created=NOW, **status):
    return {
        "metadata": {"name": name, "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"containers": [{"name": "main", "image": IMAGE}]},
        "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers), **status},
    }


def waiting(reason, message=""):
    return {"name": "main", "state": {"waiting": {"reason": reason, **({"message": message} if message else {})}}}


def terminated(code, reason="Error", finished="2026-11-30T12:00:00Z", **extra):
    return {
        "name": "main",
        "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": finished, **extra}},
    }


def phase(value, reason=""):
    return lambda _obj: (value, reason)


def replica(p):
    return p["metadata"]["name"]


def test_an_image_pull_error_names_the_image_even_when_the_kubelet_does_not():
    problem = waiting_problem(pod(containers=[waiting("ErrImagePull", "rpc error: code = Unknown desc = denied")]))
    assert problem == (
        "ErrImagePull",
        "rpc error: code = Unknown desc = denied (image registry.example.com/team/train:2)",
    )


def test_unschedulable_comes_from_the_pod_scheduled_condition():
    message = "0/5 nodes are available: 2 node(s) had untolerated taint {gpu: true}, 3 Insufficient memory."
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    assert waiting_problem(pod(conditions=[condition])) == ("Unschedulable", message)


def test_container_creating_is_not_a_problem():
    assert waiting_problem(pod(containers=[waiting("ContainerCreating")])) == ("", "")


def test_failures_say_oom_eviction_or_the_exit_code():
    assert failure(pod(phase="Failed", containers=[terminated(137, "OOMKilled")])) == (
        "OOMKilled: container main exceeded its memory limit (exit code 137)",
        137,
    )
    evicted = pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    assert failure(evicted) == ("Evicted: The node was low on resource: memory.", None)
    assert failure(pod(phase="Failed", containers=[terminated(2, message="bad flag")])) == (
        "container main exited with code 2: bad flag",
        2,
    )


def test_the_latest_warning_event_is_the_reason():
    events = [
        {"type": "Normal", "reason": "Scheduled", "message": "ok", "lastTimestamp": "2026-11-30T12:00:03Z"},
        {"type": "Warning", "reason": "FailedMount", "message": "old", "lastTimestamp": "2026-11-30T12:00:01Z"},
        {"type": "Warning", "reason": "FailedMount", "message": "new", "lastTimestamp": "2026-11-30T12:00:02Z"},
    ]
    assert event_reason(events) == "FailedMount: new"
    assert event_reason(events[:1]) == ""


def test_a_fatal_wait_becomes_fatal_only_after_the_grace_period():
    young = pod(containers=[waiting("ImagePullBackOff", 'Back-off pulling image "x"')], created=NOW)
    old = pod(
        containers=[waiting("ImagePullBackOff", 'Back-off pulling image "x"')], created=NOW - timedelta(minutes=5)
    )
    kwargs = {"phase_of": phase(Phase.PENDING), "replica_of": replica, "pull_grace": 120, "now": NOW}
    assert not observe({}, [young], **kwargs).fatal
    seen = observe({}, [old], **kwargs)
    assert seen.fatal
    assert (
        seen.reason
        == 'replica p: ImagePullBackOff: Back-off pulling image "x" (image registry.example.com/team/train:2)'
    )
    crash_loop = pod(containers=[waiting("CrashLoopBackOff", "back-off 5m0s")], created=NOW - timedelta(hours=1))
    assert not observe({}, [crash_loop], **kwargs).fatal  # shown, but it may still recover


def test_the_last_failure_explains_a_failed_workload():
    first = pod("a", "Failed", containers=[terminated(1, finished="2026-11-30T12:00:01Z")])
    last = pod("b", "Failed", containers=[terminated(137, "OOMKilled", finished="2026-11-30T12:00:09Z")])
    running = pod("c", "Running")
    seen = observe({}, [first, last, running], phase_of=phase(Phase.FAILED, "BackoffLimitExceeded"), replica_of=replica)
    assert seen.reason.startswith("replica b: OOMKilled")
    assert seen.reason.endswith("— BackoffLimitExceeded")
    assert seen.exit_code == 137
    assert seen.replicas == {"a": "Failed", "b": "Failed", "c": "Running"}


def test_success_has_exit_code_zero_and_running_clears_the_reason():
    done = observe({}, [pod(phase="Succeeded")], phase_of=phase(Phase.SUCCEEDED), replica_of=replica)
    assert (done.phase, done.exit_code) == (Phase.SUCCEEDED, 0)
    running = observe({}, [pod(phase="Running")], phase_of=phase(Phase.RUNNING, "whatever"), replica_of=replica)
    assert running.reason == ""


def test_the_image_digest_is_the_main_containers_image_id():
    digest = "registry.example.com/team/train@sha256:" + "a" * 64
    main = {"name": "main", "imageID": digest, "state": {"running": {}}}
    sidecar = {"name": "queue-proxy", "imageID": "proxy@sha256:" + "b" * 64, "state": {"running": {}}}
    started = pod(phase="Running", containers=[sidecar, main])
    started["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "main"}
    seen = observe({}, [started], phase_of=phase(Phase.RUNNING), replica_of=replica)
    assert seen.image_digest == digest
    # Without the annotation the pod's first container is the main one (the builders put it first).
    del started["metadata"]["annotations"]
    started["status"]["containerStatuses"] = [main, sidecar]
    assert observe({}, [started], phase_of=phase(Phase.RUNNING), replica_of=replica).image_digest == digest
    # Not pulled yet: the kubelet reports no image id, and nothing is recorded.
    creating = pod(containers=[{**waiting("ContainerCreating"), "imageID": ""}])
    assert observe({}, [creating], phase_of=phase(Phase.PENDING), replica_of=replica).image_digest == ""
