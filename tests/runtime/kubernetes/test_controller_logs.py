"""Every replica's log reaches the listener once and in order, through dropped log connections and a restart
of the controller; the end of a run is told only after its last line."""

from __future__ import annotations

from apps.runtime.kubernetes.podlogs import Cursor, fresh_lines, since_time, split_line
from apps.runtime.models import KubeWorkload
from tests.runtime.kubernetes.conftest import fresh_runtime, mine, row_state, wait_for
from tests.runtime.kubernetes.samples import sample_distributed, sample_job

T = "2026-11-30T10:00:00.{:09d}Z"


def stamped(ns: int, text: str) -> str:
    return f"{T.format(ns)} {text}"


def test_fresh_lines_skips_what_was_delivered_before_the_cursor():
    batch = [stamped(1, "a"), stamped(2, "b"), stamped(2, "c"), stamped(3, "d")]
    fresh, cursor, seen = fresh_lines(batch, Cursor(), 0)
    assert fresh == ["a", "b", "c", "d"]
    base = split_line(batch[3])[0]
    assert (cursor.ns, cursor.count, seen) == (base, 1, 1)
    # Asked again from an earlier time (a server that reads whole seconds): nothing is delivered twice.
    again, _cursor, _seen = fresh_lines([*batch, stamped(4, "e")], cursor, 0)
    assert again == ["e"]
    # Two lines share a time and the connection broke between them: only the second is new.
    at_b = Cursor(split_line(batch[1])[0], 1)
    resumed, cursor, _seen = fresh_lines(batch[1:], at_b, 0)
    assert resumed == ["c", "d"]
    assert since_time(base) == "2026-11-30T10:00:00.000000003Z"


def test_lines_without_a_time_are_delivered_as_they_are():
    assert fresh_lines(["no time here"], Cursor(5, 1), 0)[0] == ["no time here"]


def test_each_replica_streams_without_gaps_or_duplicates_through_dropped_connections(
    fake, cluster, listener, run_controller
):
    run_controller()
    fresh_runtime().submit(mine(sample_distributed("pytorch"), "task-1", replicas={"master": 1, "worker": 2}))
    (name,) = fake.sim.wait_created()
    pods = sorted(fake.sim.pod_names(name))
    cuts = [fake.faults.cut_log(pod, after=7, times=3) for pod in pods]  # 3 broken connections per pod
    fake.sim.start(name)
    wait_for(lambda: row_state("task-1") == "running")
    expected = {}
    for pod in pods:
        lines = [f"{pod} step {i}" for i in range(40)]
        for start in range(0, 40, 5):
            fake.sim.log(name, pod, lines[start : start + 5])
        fake.sim.log(name, pod, [f"{pod} burst {i}" for i in range(4)], same_time=True)
        expected[pod] = [*lines, *(f"{pod} burst {i}" for i in range(4))]
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-1") == "succeeded")

    replicas = {"master-0": pods[0], "worker-0": pods[1], "worker-1": pods[2]}
    for replica, pod in replicas.items():
        assert listener.lines["task-1"][replica] == expected[pod]
    assert [cut.hits for cut in cuts] == [3, 3, 3]
    resumed = [q for _m, _p, q in fake.requests_to("GET", "/log") if "sinceTime" in q]
    assert len(resumed) >= 9
    # The run heard of its end after its last line.
    assert listener.phases("task-1")[-1].value == "succeeded"
    assert listener.lines_at_change[-1] == 3 * 44


def test_a_restarted_controller_resumes_each_log_where_the_last_one_stopped(fake, cluster, listener, run_controller):
    first = run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-2"))
    (name,) = fake.sim.wait_created()
    (pod,) = fake.sim.pod_names(name)
    fake.sim.start(name)
    fake.sim.log(name, pod, [f"before {i}" for i in range(10)])
    wait_for(lambda: sum(map(len, listener.lines["task-2"].values())) == 10)
    first.stop()  # a clean stop saves the cursors and closes the sink
    cursors = KubeWorkload.objects.get(uid="task-2").log_cursors
    assert list(cursors) == [pod]
    assert cursors[pod][1] == 1

    fake.sim.log(name, pod, [f"between {i}" for i in range(5)])  # printed while no controller ran
    run_controller()
    fake.sim.log(name, pod, [f"after {i}" for i in range(5)])
    fake.sim.succeed(name)
    wait_for(lambda: row_state("task-2") == "succeeded")
    (lines,) = listener.lines["task-2"].values()
    assert lines == [
        *(f"before {i}" for i in range(10)),
        *(f"between {i}" for i in range(5)),
        *(f"after {i}" for i in range(5)),
    ]
    assert listener.closed == ["task-2", "task-2"]  # one sink per controller, each closed


def test_a_pod_that_never_started_has_no_log_to_follow(fake, cluster, listener, run_controller):
    run_controller()
    fresh_runtime().submit(mine(sample_job(), "task-3"))
    (name,) = fake.sim.wait_created()
    fake.sim.image_pull_backoff(name)
    wait_for(lambda: row_state("task-3") == "failed")
    assert fake.requests_to("GET", "/log") == []
    assert listener.lines["task-3"] == {}
    assert listener.closed == []  # nothing was ever opened
