"""What one node costs on the orchestrator's hot path, pinned in statements (the timings are bench/orchestration.py's):
a runtime's report is applied and what became ready is dispatched in one transaction of a dozen statements, the
leaves of a fan-out that end together cost one advance, a start costs an UPDATE, and none of it grows with the run.

Real transactions (transactional_db): the counts are the statements a worker or the agent sends, savepoints included.
"""

from __future__ import annotations

import threading
from dataclasses import asdict

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.accounts.models import ApiToken
from apps.jobs import orchestrator
from apps.jobs.models import JobTemplate, PipelineRun, TaskRun, TaskStatus
from apps.jobs.runtime_hooks import TaskListener
from apps.jobs.services import save_pipeline, start_run
from apps.runtime.models import Agent, DispatchLock, LocalWorkload
from apps.runtime.workload import Phase, Status, Workload

# Advancing a finished node and dispatching its successor: the run (locked), the node states, the ended attempt,
# the new one; the queue's lock and its waiting tasks, the template, the successor's token, workload and state
# (with a savepoint around the dispatch); the ended attempt's token revoked. The old path took 15 and two commits.
ADVANCE_AND_DISPATCH = 13
# Ending n leaves together: the run, the node states, n ended attempts, the queue (a savepoint, its lock, nothing
# waiting), the tokens revoked at once, the run's end, whether a retraining started the run and whether an alert rule
# of the project listens to runs ending (two indexed existence checks, cheaper than queueing a pass for every run of
# every project).
FAN_IN_FIXED = 10
# The "backfill" policy's pass reads besides what the active tasks hold and when each should end (its reservations),
# and the templates' timeouts (how long a task it starts would hold what it takes).
BACKFILL_EXTRA = 2
STARTS = 3  # tasks marked running, however many at once (PostgreSQL: and `synchronous_commit` off for them)

# Run pages are told through the channel layer (a database of its own without Redis): not counted here.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def live_agent(db):
    """A heartbeating agent, so that the local runtime takes work (nothing listens on its address)."""
    return Agent.objects.create(hostname="test", pid=1, address="127.0.0.1:9", capacity={"cpu": 4, "gpu": 0})


@pytest.fixture
def noop(live_agent, settings, tmp_path, monkeypatch):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    # The local runtime looks its agents up at most every quarter second: once per test here, so counts are exact.
    monkeypatch.setattr("apps.runtime.local.runtime.ADDRESS_TTL", 3600)
    return JobTemplate.objects.create(slug="noop", name="no-op", command=["/bin/true"], resources={"cpu": 0})


def node(name: str, *deps: str) -> dict:
    return {"name": name, "template": "noop", "cache": False, "resources": {"cpu": 0}, "depends_on": list(deps)}


def started(world, nodes: list[dict]) -> PipelineRun:
    """A run whose first nodes were created and handed to the local runtime."""
    pipe = save_pipeline(world.project_a, world.alice, name="p", spec={"nodes": nodes})
    run = start_run(pipe, world.alice)
    orchestrator.advance_run(run.pk)
    return run


def succeeded(wall_seconds: float = 0.25) -> dict:
    return asdict(Status(Phase.SUCCEEDED, exit_code=0, usage={"wall_seconds": wall_seconds}))


def workload_of(task: TaskRun) -> Workload:
    return Workload.from_dict(LocalWorkload.objects.get(uid=task.handle).spec)


def statements(ctx: CaptureQueriesContext) -> list[str]:
    """What was sent, without transaction control (which SQLite's backend sends as statements, psycopg not)."""
    return [q["sql"] for q in ctx.captured_queries if q["sql"] not in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT")]


def test_advancing_a_finished_node_and_dispatching_its_successor_takes_few_queries(world, noop):
    run = started(world, [node("a"), node("b", "a"), node("c", "b"), node("d", "c")])
    orchestrator.advance_reported(run.pk, {run.tasks.get(node="a").pk: succeeded()})  # the run is running now
    b = run.tasks.get(node="b")
    assert b.status == TaskStatus.QUEUED

    with CaptureQueriesContext(connection) as ctx:
        assert orchestrator.advance_reported(run.pk, {b.pk: succeeded()})
    assert len(statements(ctx)) <= ADVANCE_AND_DISPATCH, "\n".join(statements(ctx))

    b.refresh_from_db()
    assert (b.status, b.exit_code, b.usage) == (TaskStatus.SUCCEEDED, 0, {"wall_seconds": 0.25})
    assert (b.finished_at - b.started_at).total_seconds() == pytest.approx(0.25)  # its start was never reported
    assert ApiToken.objects.get(pk=b.api_token_id).revoked_at is not None
    c = run.tasks.get(node="c")
    assert (c.status, c.handle, c.runtime) == (TaskStatus.QUEUED, f"task-{c.pk}", "local")
    assert workload_of(c).env["PORTAL_INPUT_B"] == b.output_dir  # the upstream's output, known to the advance
    assert ApiToken.objects.get(pk=c.api_token_id).revoked_at is None
    assert not run.tasks.filter(node="d").exists()


def test_the_cost_does_not_grow_with_the_run(world, noop):
    run = started(world, [node("n0"), *(node(f"n{i}", f"n{i - 1}") for i in range(1, 12))])
    counts = []
    for i in range(11):
        task = run.tasks.get(node=f"n{i}")
        with CaptureQueriesContext(connection) as ctx:
            assert orchestrator.advance_reported(run.pk, {task.pk: succeeded()})
        counts.append(len(statements(ctx)))
    assert counts[0] == ADVANCE_AND_DISPATCH + 1  # the first end also marks the run running
    assert set(counts[1:]) == {ADVANCE_AND_DISPATCH}
    assert run.tasks.get(node="n11").status == TaskStatus.QUEUED


@pytest.mark.parametrize("policy", ["greedy", "backfill"])
def test_either_queue_policy_dispatches_the_successor_for_what_it_did(world, noop, settings, policy):
    # The greedy queue reads a long queue a chunk at a time; a short one (an advance's, mostly) costs what it did
    # when it was read whole: its projects, and whether any has a limit, come from the tasks read.
    settings.PORTAL_QUEUE_POLICY = policy
    run = started(world, [node("a"), node("b", "a"), node("c", "b")])
    orchestrator.advance_reported(run.pk, {run.tasks.get(node="a").pk: succeeded()})
    b = run.tasks.get(node="b")
    with CaptureQueriesContext(connection) as ctx:
        assert orchestrator.advance_reported(run.pk, {b.pk: succeeded()})
    extra = BACKFILL_EXTRA if policy == "backfill" else 0
    assert len(statements(ctx)) == ADVANCE_AND_DISPATCH + extra, "\n".join(statements(ctx))
    assert run.tasks.get(node="c").status == TaskStatus.QUEUED


def test_leaves_that_end_together_cost_one_advance(world, noop):
    leaves = [f"leaf{i}" for i in range(6)]
    run = started(world, [node("root"), *(node(leaf, "root") for leaf in leaves)])
    orchestrator.advance_reported(run.pk, {run.tasks.get(node="root").pk: succeeded()})
    tasks = {t.node: t for t in run.tasks.filter(node__in=leaves)}
    assert {t.status for t in tasks.values()} == {TaskStatus.QUEUED}

    workloads = [workload_of(t) for t in tasks.values()]
    notices = [(w, Phase.RUNNING, None) for w in workloads]
    notices += [(w, Phase.SUCCEEDED, Status(Phase.SUCCEEDED, exit_code=0)) for w in workloads]
    with CaptureQueriesContext(connection) as ctx:
        TaskListener().changed_many(notices)
    assert len(statements(ctx)) <= FAN_IN_FIXED + len(leaves), "\n".join(statements(ctx))
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert set(run.tasks.values_list("status", flat=True)) == {TaskStatus.SUCCEEDED}


def test_starts_are_one_update_and_never_undo_an_end(world, noop):
    run = started(world, [node("x"), node("y"), node("z")])
    tasks = {t.node: t for t in run.tasks.all()}
    TaskRun.objects.filter(pk=tasks["z"].pk).update(status=TaskStatus.SUCCEEDED)  # ended before its start arrives

    notices = [(workload_of(t), Phase.RUNNING, None) for t in tasks.values()]
    with CaptureQueriesContext(connection) as ctx:
        TaskListener().changed_many(notices)
    assert len(statements(ctx)) <= STARTS
    assert dict(run.tasks.values_list("node", "status")) == {"x": "running", "y": "running", "z": "succeeded"}
    assert run.tasks.get(node="x").started_at is not None


def test_an_end_reported_with_its_start_skips_the_start(world, noop):
    run = started(world, [node("x")])
    x = run.tasks.get()
    workload = workload_of(x)
    with CaptureQueriesContext(connection) as ctx:
        TaskListener().changed_many(
            [(workload, Phase.RUNNING, None), (workload, Phase.SUCCEEDED, Status(Phase.SUCCEEDED, exit_code=0))]
        )
    assert not [sql for sql in statements(ctx) if sql.startswith('UPDATE "jobs_taskrun"') and "'running'" in sql]
    x.refresh_from_db()
    assert x.status == TaskStatus.SUCCEEDED
    assert x.started_at is not None
    run.refresh_from_db()
    assert run.status == "succeeded"


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("SKIP LOCKED: SQLite serialises writers instead")


def hold(lock_rows, held: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread that holds `lock_rows()`'s row locks in a transaction of its own until `release` is set."""

    def run() -> None:
        try:
            with transaction.atomic():
                lock_rows()
                held.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert held.wait(30)
    return thread


def test_a_run_another_process_advances_is_left_to_it(world, noop, postgres_only):
    run = started(world, [node("a"), node("b", "a")])
    a = run.tasks.get(node="a")
    held, release = threading.Event(), threading.Event()
    thread = hold(lambda: list(PipelineRun.objects.select_for_update().filter(pk=run.pk)), held, release)
    try:
        assert orchestrator.advance_reported(run.pk, {a.pk: succeeded()}) is False  # at once, not after the lock
    finally:
        release.set()
        thread.join()
    a.refresh_from_db()
    assert a.status == TaskStatus.QUEUED
    assert orchestrator.advance_reported(run.pk, {a.pk: succeeded()}) is True
    assert run.tasks.get(node="b").status == TaskStatus.QUEUED


def test_a_busy_queue_does_not_hold_up_the_advance(world, noop, postgres_only, monkeypatch):
    from apps.jobs import tasks

    later = []
    monkeypatch.setattr(tasks.dispatch_waiting, "delay", lambda: later.append(True))
    run = started(world, [node("a"), node("b", "a")])
    a = run.tasks.get(node="a")
    held, release = threading.Event(), threading.Event()
    thread = hold(lambda: list(DispatchLock.objects.select_for_update().filter(pk=1)), held, release)
    try:
        assert orchestrator.advance_reported(run.pk, {a.pk: succeeded()}) is True
    finally:
        release.set()
        thread.join()
    assert run.tasks.get(node="a").status == TaskStatus.SUCCEEDED  # recorded
    assert run.tasks.get(node="b").status == TaskStatus.WAITING  # left to a dispatch pass of its own
    assert later == [True]
    orchestrator.dispatch_waiting()
    assert run.tasks.get(node="b").status == TaskStatus.QUEUED


def failed() -> dict:
    return asdict(Status(Phase.FAILED, exit_code=1, reason="exit code 1"))


def test_an_advance_reads_what_changed_and_still_sees_every_attempt(world, noop):
    """The node states an advance reads after the first are the attempts it saw unfinished and the new ones: a
    retry replaces the failed attempt, an end is seen, and the states agree with a full read at every step."""
    from apps.jobs.runstate import locked_node_states, node_states

    def states(tasks: dict[str, TaskRun]) -> dict[str, tuple[int, int, str]]:
        return {name: (t.pk, t.attempt, t.status) for name, t in tasks.items()}

    flaky = {**node("b", "a"), "retries": 1, "retry_backoff": 0}
    run = started(world, [node("a"), flaky, node("c", "b")])
    run = PipelineRun.objects.get(pk=run.pk)
    assert states(locked_node_states(run)) == states(node_states(run.pk))
    steps = [("a", succeeded()), ("b", failed())]
    for name, report in steps:
        task = run.tasks.filter(node=name).order_by("-attempt").first()
        assert orchestrator.advance_reported(run.pk, {task.pk: report})
        assert states(locked_node_states(run)) == states(node_states(run.pk))
    retry = run.tasks.get(node="b", attempt=2)
    orchestrator.advance_run(run.pk)  # its backoff (0 s) is over: dispatched
    assert states(locked_node_states(run)) == states(node_states(run.pk))
    assert orchestrator.advance_reported(run.pk, {retry.pk: succeeded()})
    seen = locked_node_states(run)
    assert states(seen) == states(node_states(run.pk))
    assert (seen["b"].attempt, seen["b"].status) == (2, TaskStatus.SUCCEEDED)
    assert seen["c"].status == TaskStatus.QUEUED
