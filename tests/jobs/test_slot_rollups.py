"""The overview's roll-ups (`RunSlot`, `TaskUsageSlot` and the deltas the triggers of migration jobs.0015 append)
equal a fresh aggregate of the runs and task attempts after every kind of write: creates, saves, queryset updates,
bulk updates, deletes, a project's cascade; with the deltas compacted after every write and without; the migration's
fill equals them too. On PostgreSQL, writers never wait on each other for the roll-ups (the crosswise pattern that
deadlocked with shared summary rows commits on both sides), and the compaction is one at a time and loses nothing
that commits while it runs."""

from __future__ import annotations

import importlib
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction

from apps.jobs import rollups
from apps.jobs import tasks as job_tasks
from apps.jobs.models import (
    SLOT_SECONDS,
    PipelineRun,
    RunSlot,
    RunSlotDelta,
    RunStatus,
    TaskRun,
    TaskStatus,
    TaskUsageSlot,
    TaskUsageSlotDelta,
)
from tests.projects.factories import PipelineRunFactory, TaskRunFactory

migration = importlib.import_module("apps.jobs.migrations.0015_slot_rollups")

T0 = datetime(2026, 12, 1, 10, 7, 30, tzinfo=UTC)


def slot(at: datetime) -> datetime:
    seconds = int(at.timestamp()) // SLOT_SECONDS * SLOT_SECONDS
    return datetime.fromtimestamp(seconds, tz=UTC)


def number(doc: dict, key: str) -> float | None:
    value = doc.get(key) if isinstance(doc, dict) else None
    if isinstance(value, bool):
        return None
    try:
        return float(value) if isinstance(value, int | float | str) else None
    except ValueError:
        return None


def fresh_runs() -> dict[tuple, int]:
    counts: dict[tuple, int] = defaultdict(int)
    for run in PipelineRun.objects.all():
        counts[(run.project_id, slot(run.created_at), run.status)] += 1
    return dict(counts)


def fresh_usage() -> dict[tuple, tuple[int, float, float]]:
    sums: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0.0])
    for task in TaskRun.objects.filter(finished_at__isnull=False).select_related("run"):
        row = sums[(task.run.project_id, slot(task.finished_at), task.failure_cause)]
        gpu, wall = number(task.resources, "gpu"), number(task.usage, "wall_seconds")
        row[0] += 1
        row[1] += number(task.usage, "cpu_seconds") or 0
        row[2] += gpu * wall if gpu is not None and wall is not None else 0
    return {key: (n, round(cpu, 6), round(gpu, 6)) for key, (n, cpu, gpu) in sums.items()}


def stored_runs() -> dict[tuple, int]:
    """What a reader sums: the summary and the deltas not yet compacted."""
    counts: dict[tuple, int] = defaultdict(int)
    for model in (RunSlot, RunSlotDelta):
        for s in model.objects.all():
            counts[(s.project_id, s.slot, s.status)] += s.runs
    return {key: n for key, n in counts.items() if n}


def stored_usage() -> dict[tuple, tuple[int, float, float]]:
    sums: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0.0])
    for model in (TaskUsageSlot, TaskUsageSlotDelta):
        for s in model.objects.all():
            row = sums[(s.project_id, s.slot, s.failure_cause)]
            row[0] += s.tasks
            row[1] += s.cpu_seconds
            row[2] += s.gpu_seconds
    # to 6 decimals: sums of floats, added and taken away in another order
    return {key: (n, round(cpu, 6) + 0.0, round(gpu, 6) + 0.0) for key, (n, cpu, gpu) in sums.items() if n}


@pytest.fixture(params=["deltas", "compacted"])
def assert_rollups_are_true(request):
    """After a write: what a reader sums equals a fresh aggregate; with `compacted`, compacts first and checks that
    the deltas are gone and the summary alone holds it (no row of a zero count left)."""

    def check() -> None:
        if request.param == "compacted":
            assert rollups.compact() is not None
            assert not RunSlotDelta.objects.exists()
            assert not TaskUsageSlotDelta.objects.exists()
            assert not RunSlot.objects.filter(runs=0).exists()
            assert not TaskUsageSlot.objects.filter(tasks=0).exists()
        assert stored_runs() == fresh_runs()
        assert stored_usage() == fresh_usage()

    return check


def test_runs_count_in_the_slot_of_their_creation_under_their_status_through_every_write(
    world, assert_rollups_are_true
):
    a, b = world.project_a, world.project_b
    runs = [
        PipelineRunFactory(project=a, status=RunStatus.QUEUED, created_at=T0 + timedelta(minutes=7 * i))
        for i in range(6)
    ]
    PipelineRunFactory(project=b, status=RunStatus.QUEUED, created_at=T0)
    assert stored_runs()[(a.pk, slot(T0), RunStatus.QUEUED)] == 2  # 10:07:30 and 10:14:30 share 10:00–10:15
    assert_rollups_are_true()

    runs[0].status = RunStatus.RUNNING
    runs[0].save(update_fields=["status"])
    assert_rollups_are_true()

    PipelineRun.objects.filter(pk__in=[r.pk for r in runs[1:4]]).update(status=RunStatus.SUCCEEDED)
    assert_rollups_are_true()

    for run, status in zip(runs[3:], (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CANCELLING), strict=True):
        run.status = status
    PipelineRun.objects.bulk_update(runs[3:], ["status"])
    assert_rollups_are_true()

    PipelineRun.objects.filter(pk=runs[5].pk).update(reason="nothing the roll-up counts")
    runs[4].created_at = T0 + timedelta(days=1)  # moved to another slot (an import, a fix by hand)
    runs[4].save()
    assert_rollups_are_true()

    runs[1].delete()
    PipelineRun.objects.filter(project=a, status=RunStatus.SUCCEEDED).delete()
    assert_rollups_are_true()

    PipelineRun.objects.bulk_create(
        PipelineRun(project=b, pipeline_name="bulk", number=100 + i, status=RunStatus.FAILED, created_at=T0)
        for i in range(5)
    )
    assert stored_runs()[(b.pk, slot(T0), RunStatus.FAILED)] == 5
    assert_rollups_are_true()


def test_task_attempts_count_their_usage_in_the_slot_they_ended_in(world, assert_rollups_are_true):
    run = PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING, created_at=T0)
    waiting = TaskRunFactory(run=run, node="prepare", status=TaskStatus.WAITING)
    assert stored_usage() == {}

    waiting.status, waiting.finished_at = TaskStatus.SUCCEEDED, T0 + timedelta(minutes=20)
    waiting.usage = {"cpu_seconds": 30.5, "wall_seconds": 60}
    waiting.resources = {"cpu": 1, "gpu": 2}
    waiting.save()
    assert stored_usage() == {(world.project_a.pk, slot(T0) + timedelta(minutes=15), ""): (1, 30.5, 120.0)}

    tasks = [TaskRunFactory(run=run, node=f"n{i}", status=TaskStatus.RUNNING, resources={"gpu": "1"}) for i in range(4)]
    TaskRun.objects.filter(pk__in=[t.pk for t in tasks[:2]]).update(
        status=TaskStatus.FAILED, finished_at=T0, failure_cause="oom", usage={"cpu_seconds": 7, "wall_seconds": 10}
    )
    assert_rollups_are_true()

    for i, task in enumerate(tasks[2:]):
        task.status, task.finished_at, task.usage = TaskStatus.SUCCEEDED, T0, {"cpu_seconds": i + 0.1}
    TaskRun.objects.bulk_update(tasks[2:], ["status", "finished_at", "usage"])
    assert_rollups_are_true()

    tasks[2].usage = {"cpu_seconds": 99, "wall_seconds": 3}  # the usage recorded after the end
    tasks[2].save(update_fields=["usage"])
    TaskRun.objects.filter(pk=tasks[0].pk).update(failure_cause="image_pull")  # diagnosed again
    TaskRun.objects.filter(pk=tasks[1].pk).update(reason="nothing the roll-up counts")
    assert_rollups_are_true()

    odd = TaskRunFactory(run=run, node="odd", usage={"cpu_seconds": "a lot", "wall_seconds": [1]}, resources=[])
    assert odd.pk  # a value that is no number counts nothing and does not stop the write
    assert_rollups_are_true()

    tasks[3].delete()
    TaskRun.objects.filter(failure_cause="oom").delete()
    assert_rollups_are_true()

    run.delete()  # its attempts go with it
    assert stored_usage() == {}
    assert_rollups_are_true()


def test_deleting_a_project_takes_its_roll_ups_and_leaves_the_others(world, assert_rollups_are_true):
    for project in (world.project_a, world.project_b):
        run = PipelineRunFactory(project=project, created_at=T0)
        TaskRunFactory(run=run, usage={"cpu_seconds": 5})
    theirs = (stored_runs(), stored_usage())

    world.project_a.delete()

    assert not RunSlot.objects.filter(project_id=world.project_a.pk).exists()
    assert not TaskUsageSlot.objects.filter(project_id=world.project_a.pk).exists()
    assert {k: v for k, v in theirs[0].items() if k[0] == world.project_b.pk} == stored_runs()
    assert_rollups_are_true()
    rollups.compact()  # the deltas its runs' removal appended go with the compaction
    assert not RunSlotDelta.objects.filter(project_id=world.project_a.pk).exists()
    assert not TaskUsageSlotDelta.objects.filter(project_id=world.project_a.pk).exists()


def test_the_migration_fills_the_roll_ups_from_what_is_stored(world, assert_rollups_are_true):
    for i in range(5):
        run = PipelineRunFactory(project=world.project_a, status=RunStatus.FAILED, created_at=T0 + timedelta(hours=i))
        TaskRunFactory(
            run=run,
            finished_at=T0 + timedelta(hours=i, minutes=40),
            failure_cause="oom" if i % 2 else "",
            usage={"cpu_seconds": i, "wall_seconds": 100},
            resources={"gpu": 1},
        )
    TaskRunFactory(run=run, node="waiting", status=TaskStatus.WAITING)
    expected = (stored_runs(), stored_usage())
    for model in (RunSlot, TaskUsageSlot, RunSlotDelta, TaskUsageSlotDelta):
        model.objects.all().delete()

    with connection.cursor() as cursor:
        for sql in migration.backfill_sql(connection.vendor):
            cursor.execute(sql)

    assert (stored_runs(), stored_usage()) == expected
    assert_rollups_are_true()


def test_compacting_twice_changes_nothing_and_an_empty_compaction_folds_nothing(world):
    run = PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING, created_at=T0)
    TaskRunFactory(run=run, finished_at=T0, usage={"cpu_seconds": 3})
    run.status = RunStatus.SUCCEEDED
    run.save(update_fields=["status"])
    before = (stored_runs(), stored_usage())

    assert rollups.compact() == (3, 1)  # the run's +1 as queued, then -1 queued and +1 succeeded; the task's +1
    after = (stored_runs(), stored_usage())
    assert rollups.compact() == (0, 0)

    assert before == after == (stored_runs(), stored_usage()) == (fresh_runs(), fresh_usage())
    assert RunSlot.objects.count() == 1  # the queued row fell to zero and went


def test_beat_compacts_the_deltas_every_interval(world, settings):
    entry = settings.CELERY_BEAT_SCHEDULE["compact-slot-rollups"]
    assert entry["task"] == "apps.jobs.tasks.compact_rollups"
    assert entry["schedule"] == float(settings.PORTAL_ROLLUP_COMPACT_INTERVAL) == 60.0
    PipelineRunFactory(project=world.project_a, status=RunStatus.QUEUED, created_at=T0)

    job_tasks.compact_rollups()

    assert not RunSlotDelta.objects.exists()
    assert stored_runs() == fresh_runs() == {(world.project_a.pk, slot(T0), RunStatus.QUEUED): 1}


# --- Concurrent writers and compactions (PostgreSQL: SQLite serialises its writers) -----------------------------


def in_thread(target, *args) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target(*args)
        except BaseException as exc:  # reported by the test's assertion
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def no_waiting() -> None:
    """In the current transaction: any lock wait over 1 s is an error (the writers must never wait for a lock)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '1s'")


def end_task(task: TaskRun) -> None:
    TaskRun.objects.filter(pk=task.pk).update(
        status=TaskStatus.SUCCEEDED, finished_at=T0 + timedelta(minutes=2), usage={"cpu_seconds": 4}
    )


def end_run(run: PipelineRun) -> None:
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("compacted", [False, True])
def test_crosswise_writers_of_one_slot_both_commit_without_waiting(world, compacted):
    """T1 ends a task, then ends its run; T2 ends a run, then a task: the same project and quarter hour, so with
    shared roll-up rows T1 held the usage row and wanted the (slot, running) row that T2 held, which wanted the
    usage row: a deadlock. With deltas, each step of each takes no lock the other holds (lock_timeout 1 s), and
    each step completes while the other transaction is still open."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers: PostgreSQL")
    runs = [PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING, created_at=T0) for _ in range(2)]
    tasks = [TaskRunFactory(run=run, status=TaskStatus.RUNNING) for run in runs]
    if compacted:
        rollups.compact()
    steps = [threading.Event() for _ in range(4)]
    reached: list[bool] = []

    def first() -> None:
        with transaction.atomic():
            no_waiting()
            end_task(tasks[0])
            steps[0].set()
            reached.append(steps[1].wait(5))  # T2 has ended its run
            end_run(runs[0])
            steps[2].set()
            reached.append(steps[3].wait(5))  # T2 has ended its task, its transaction still open

    def second() -> None:
        reached.append(steps[0].wait(5))
        with transaction.atomic():
            no_waiting()
            end_run(runs[1])
            steps[1].set()
            reached.append(steps[2].wait(5))
            end_task(tasks[1])
            steps[3].set()

    (t1, errors1), (t2, errors2) = in_thread(first), in_thread(second)
    t1.join(15)
    t2.join(15)

    assert (errors1, errors2) == ([], [])
    assert reached == [True, True, True, True]
    assert stored_runs() == {(world.project_a.pk, slot(T0), RunStatus.SUCCEEDED): 2}
    assert stored_usage() == {(world.project_a.pk, slot(T0), ""): (2, 8.0, 0.0)}
    assert (stored_runs(), stored_usage()) == (fresh_runs(), fresh_usage())


@pytest.mark.django_db(transaction=True)
def test_one_compaction_at_a_time_and_writers_never_wait_for_it(world):
    """While a compaction's transaction is open: a second compaction returns at once, folding nothing; a writer
    appends and commits without waiting. A writer whose transaction was open across the compaction keeps its
    deltas for the next one. Nothing is counted twice or lost, whichever commits first."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent compactions: PostgreSQL")
    runs = [PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING, created_at=T0) for _ in range(3)]
    compacting, compacted, wrote = (threading.Event() for _ in range(3))
    results: dict[str, object] = {}

    def compactor() -> None:
        with transaction.atomic():
            results["first"] = rollups.compact()  # joins this transaction: holds the lock until it commits
            compacting.set()
            results["writer committed meanwhile"] = wrote.wait(5)
        compacted.set()

    def slow_writer() -> None:  # open before the compaction, committed after it
        with transaction.atomic():
            no_waiting()
            end_run(runs[2])
            started.set()
            results["compaction committed meanwhile"] = compacted.wait(5)

    started = threading.Event()
    slow, slow_errors = in_thread(slow_writer)
    assert started.wait(5)
    comp, comp_errors = in_thread(compactor)
    assert compacting.wait(5)

    results["second"] = rollups.compact()  # this thread's own connection, in autocommit
    with transaction.atomic():
        no_waiting()
        end_run(runs[0])  # committed while the compaction is open
    wrote.set()
    comp.join(10)
    slow.join(10)

    assert (slow_errors, comp_errors) == ([], [])
    assert results["second"] is None
    assert results["first"] == (3, 0)  # the three runs' creation; not the slow writer's uncommitted change
    assert results["writer committed meanwhile"]
    assert results["compaction committed meanwhile"]
    assert (stored_runs(), stored_usage()) == (fresh_runs(), fresh_usage())
    assert rollups.compact() == (4, 0)  # both writers' -1 running, +1 succeeded
    assert not RunSlotDelta.objects.exists()
    assert (
        stored_runs()
        == fresh_runs()
        == {
            (world.project_a.pk, slot(T0), RunStatus.RUNNING): 1,
            (world.project_a.pk, slot(T0), RunStatus.SUCCEEDED): 2,
        }
    )


@pytest.mark.django_db(transaction=True)
def test_a_compaction_meeting_a_project_deletion_gives_up_and_the_deletion_commits(world):
    """The deletion holds the project's row, then deletes its summary rows; the compaction, holding a summary row it
    updated, wants to share the project's row for a summary row it inserted: a cycle. The compaction gives up within
    its lock_timeout (before the deadlock detector, which might abort the deletion), the deletion commits, and the
    next pass drops the gone project's deltas."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent compactions: PostgreSQL")
    from apps.projects.models import Project

    project = world.project_a
    PipelineRunFactory(project=project, status=RunStatus.QUEUED, created_at=T0)
    rollups.compact()  # a summary row the next compaction updates (and locks)
    PipelineRunFactory(project=project, status=RunStatus.QUEUED, created_at=T0)
    PipelineRunFactory(project=project, status=RunStatus.QUEUED, created_at=T0 + timedelta(days=1))  # a new row
    locked, results = threading.Event(), {}

    def delete() -> None:
        with transaction.atomic():
            Project.objects.select_for_update().get(pk=project.pk)
            locked.set()
            threading.Event().wait(0.3)  # the compaction meanwhile takes its rows and waits for the project's
            RunSlot.objects.filter(project_id=project.pk).delete()
            PipelineRun.objects.filter(project_id=project.pk).delete()
            Project.objects.filter(pk=project.pk).delete()

    thread, errors = in_thread(delete)
    assert locked.wait(5)
    started = time.monotonic()
    results["compaction"] = rollups.compact()
    results["seconds"] = time.monotonic() - started
    thread.join(10)

    assert errors == []
    assert results["compaction"] is None
    assert results["seconds"] < 1  # gave up, not deadlocked (deadlock_timeout is 1 s)
    assert not Project.objects.filter(pk=project.pk).exists()
    assert rollups.compact() is not None
    assert not RunSlotDelta.objects.filter(project_id=project.pk).exists()
    assert stored_runs() == fresh_runs()
