"""The overview's roll-ups (`RunSlot`, `TaskUsageSlot`, kept by the triggers of migration jobs.0015) equal a fresh
aggregate of the runs and task attempts after every kind of write: creates, saves, queryset updates, bulk updates,
deletes, a project's cascade; and the migration's fill equals them too."""

from __future__ import annotations

import importlib
import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction

from apps.jobs.models import SLOT_SECONDS, PipelineRun, RunSlot, RunStatus, TaskRun, TaskStatus, TaskUsageSlot
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
    return {(s.project_id, s.slot, s.status): s.runs for s in RunSlot.objects.exclude(runs=0)}


def stored_usage() -> dict[tuple, tuple[int, float, float]]:
    return {
        (s.project_id, s.slot, s.failure_cause): (s.tasks, round(s.cpu_seconds, 6), round(s.gpu_seconds, 6))
        for s in TaskUsageSlot.objects.exclude(tasks=0)
    }


def assert_rollups_are_true() -> None:
    assert stored_runs() == fresh_runs()
    assert stored_usage() == fresh_usage()  # to 6 decimals: sums of floats, added and taken away in another order


def test_runs_count_in_the_slot_they_were_created_in_under_their_status_through_every_write(world):
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


def test_task_attempts_count_their_usage_in_the_slot_they_ended_in(world):
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


def test_deleting_a_project_takes_its_roll_ups_and_leaves_the_others(world):
    for project in (world.project_a, world.project_b):
        run = PipelineRunFactory(project=project, created_at=T0)
        TaskRunFactory(run=run, usage={"cpu_seconds": 5})
    theirs = (stored_runs(), stored_usage())

    world.project_a.delete()

    assert not RunSlot.objects.filter(project_id=world.project_a.pk).exists()
    assert not TaskUsageSlot.objects.filter(project_id=world.project_a.pk).exists()
    assert {k: v for k, v in theirs[0].items() if k[0] == world.project_b.pk} == stored_runs()
    assert_rollups_are_true()


def test_the_migration_fills_the_roll_ups_from_what_is_stored(world):
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
    RunSlot.objects.all().delete()
    TaskUsageSlot.objects.all().delete()

    with connection.cursor() as cursor:
        for sql in migration.backfill_sql(connection.vendor):
            cursor.execute(sql)

    assert (stored_runs(), stored_usage()) == expected
    assert_rollups_are_true()


@pytest.mark.django_db(transaction=True)
def test_concurrent_status_changes_of_one_slot_lose_no_count(world):
    """Two transactions move runs of the same slot at once: the second waits for the first's row of the roll-up
    and adds to what it committed (PostgreSQL; SQLite serialises its writers anyway)."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers: PostgreSQL")
    runs = [PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING, created_at=T0) for _ in range(8)]
    first_wrote, errors = threading.Event(), []

    def move(ids: list[int], hold: bool) -> None:
        try:
            with transaction.atomic():
                PipelineRun.objects.filter(pk__in=ids).update(status=RunStatus.SUCCEEDED)
                if hold:
                    first_wrote.set()
                    threading.Event().wait(0.5)  # the other writer reaches the same roll-up rows meanwhile
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            first_wrote.set()
            connections.close_all()

    first = threading.Thread(target=move, args=([r.pk for r in runs[:4]], True))
    first.start()
    first_wrote.wait(5)
    second = threading.Thread(target=move, args=([r.pk for r in runs[4:]], False))
    second.start()
    first.join(10)
    second.join(10)

    assert errors == []
    assert stored_runs() == {(world.project_a.pk, slot(T0), RunStatus.SUCCEEDED): 8}
    assert_rollups_are_true()
