"""Watches resume from the last resourceVersion after a dropped connection, relist on 410 Gone, and a
periodic resync catches what a watch missed: no run is stranded."""

from __future__ import annotations

import dataclasses
import threading
from urllib.parse import parse_qs

from apps.runtime.kubernetes.client import POD, client_for
from apps.runtime.kubernetes.manifests import Resource
from apps.runtime.kubernetes.watch import Watcher
from tests.runtime.kubernetes.conftest import FAST, fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_job

JOBS = Resource("batch/v1", "Job", "jobs")
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "labels": {"app.kubernetes.io/managed-by": "mlops-portal"}},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}},
}


def watch_versions(fake, path_part: str) -> list[str]:
    """The resourceVersion of every watch request on `path_part`, in order."""
    versions = []
    for _method, path, query in fake.requests_to("GET", path_part):
        params = parse_qs(query)
        if params.get("watch") == ["true"] and path.endswith(path_part):
            versions.append(params.get("resourceVersion", [""])[0])
    return versions


def start_watcher(cluster, resource: Resource, resync: float = 30) -> tuple[Watcher, threading.Event]:
    changed = threading.Event()
    watcher = Watcher(client_for(cluster), resource, "team-a", resync=resync, on_change=changed.set).start()
    assert watcher.synced.wait(5)
    return watcher, changed


def test_a_dropped_watch_resumes_from_the_last_version_it_saw(fake, cluster):
    fake.faults.cut_watch(r"/jobs$", after=2)  # the first watch: ADDED, MODIFIED, then the connection breaks
    watcher, _changed = start_watcher(cluster, JOBS)
    try:
        fake.store.create(("batch", "jobs"), "team-a", JOB)  # ADDED, then MODIFIED (the status): cut after
        seen_last = fake.store.get(("batch", "jobs"), "team-a", "train")["metadata"]["resourceVersion"]
        wait_for(lambda: watcher.get("train") is not None)
        fake.sim.start("train")
        wait_for(lambda: (watcher.get("train") or {}).get("status", {}).get("ready") == 1, message="missed a change")
        versions = watch_versions(fake, "/jobs")
        assert len(versions) >= 2
        # The second watch started where the first stopped: at the version of the last event it received.
        assert versions[1] == seen_last
        assert watcher.lists == 1  # no relist was needed
    finally:
        watcher.stop()


def test_410_gone_makes_the_watch_relist(fake, cluster):
    fake.faults.gone(r"/jobs$")
    watcher, _changed = start_watcher(cluster, JOBS)
    try:
        wait_for(lambda: watcher.lists >= 2, message="never relisted")
        fake.store.create(("batch", "jobs"), "team-a", JOB)
        wait_for(lambda: watcher.get("train") is not None)
    finally:
        watcher.stop()


def test_a_deleted_object_leaves_the_cache(fake, cluster):
    fake.store.create(("batch", "jobs"), "team-a", JOB)
    watcher, _changed = start_watcher(cluster, JOBS)
    try:
        assert watcher.get("train") is not None
        fake.store.delete(("batch", "jobs"), "team-a", "train", "Foreground")
        wait_for(lambda: watcher.get("train") is None)
    finally:
        watcher.stop()


def test_the_controller_watches_only_the_portals_pods(fake, cluster, listener, run_controller):
    thread = run_controller()
    fake.store.create(("", "pods"), "team-a", {"metadata": {"name": "not-ours"}, "spec": {"containers": []}})
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    (name,) = fake.sim.wait_created()
    (pod,) = fake.sim.pod_names(name)
    link = wait_for(lambda: thread.controller.links.get(cluster.pk))
    watcher = wait_for(lambda: link.watchers.get(("team-a", POD)))
    wait_for(lambda: watcher.get(pod))
    assert watcher.get("not-ours") is None
    # The pod is known from the initial list; the watch that follows it may open a moment later.
    queries = wait_for(
        lambda: [parse_qs(q) for _m, _p, q in fake.requests_to("GET", "/namespaces/team-a/pods") if "watch=true" in q]
    )
    assert all(q["labelSelector"] == ["app.kubernetes.io/managed-by=mlops-portal"] for q in queries)


def test_a_run_finishes_through_dropped_watches_and_410s(fake, cluster, listener, run_controller):
    fake.faults.cut_watch(r"/jobs$", after=1, times=3)
    fake.faults.cut_watch(r"/pods$", after=1, times=3)
    fake.faults.gone(r"/jobs$", times=2)
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-2"))
    (name,) = fake.sim.wait_created()
    fake.sim.start(name)
    wait_for(lambda: row_state("task-2") == "running")
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-2") == "succeeded", message="stranded")


def test_the_periodic_resync_catches_what_a_silent_watch_missed(fake, cluster, listener, run_controller):
    mute = fake.faults.mute_watch(r"/jobs$", times=1000)  # every jobs watch hears nothing
    thread = run_controller(dataclasses.replace(FAST, resync=1))
    fresh_runtime().submit(mine(sample_job(), "task-3"))
    (name,) = fake.sim.wait_created()
    link = wait_for(lambda: thread.controller.links.get(cluster.pk))
    jobs = wait_for(lambda: link.watchers.get(("team-a", JOBS)))
    assert jobs.synced.wait(5)
    listed = jobs.lists
    fake.sim.start(name)  # changes only a list can see now
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-3") == "succeeded", timeout=20, message="the resync never caught up")
    assert jobs.lists > listed
    assert mute.hits >= 1
