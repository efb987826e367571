"""The orchestrator's lock on a run lets rows that refer to the run be written meanwhile (PostgreSQL).

An advance locks its run's row for the length of its transaction. With FOR UPDATE that also blocked every foreign
key check on the row (FOR KEY SHARE): a task's `runs/create` (a tracking run citing its pipeline run and task)
waited at its commit for the advance, and under load the two deadlocked. The advance changes no key, so it takes
FOR NO KEY UPDATE, which leaves foreign key checks free and still excludes other advances."""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun
from apps.jobs.services import save_pipeline, start_run
from apps.models.models import Run
from tests.factories import experiment, python_template

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(world):
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite locks the whole database)")
    python_template(world.project_a)
    nodes = [{"name": "a", "template": "py", "args": {"code": "1"}}]
    pipe = save_pipeline(world.project_a, world.alice, name="p", spec={"nodes": nodes})
    return start_run(pipe, world.alice)


def the_advance_lock(run: PipelineRun) -> str:
    """The statement with which an advance locks its run."""
    with CaptureQueriesContext(connection) as ctx:
        orchestrator.advance_run(run.pk)
    return next(q["sql"] for q in ctx.captured_queries if "FOR " in q["sql"] and '"jobs_pipelinerun"' in q["sql"])


def holding(sql: str, until: threading.Event, locked: threading.Event) -> threading.Thread:
    """A thread that runs `sql` (a lock) in a transaction and holds it until `until` is set."""

    def hold():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql)
                locked.set()
                until.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_a_tracking_run_of_the_pipeline_run_commits_while_an_advance_holds_the_run(world, run):
    sql = the_advance_lock(run)
    assert "FOR NO KEY UPDATE" in sql

    done, locked = threading.Event(), threading.Event()
    thread = holding(sql, done, locked)
    try:
        assert locked.wait(30)
        exp = experiment(world.project_a)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '3s'")  # FOR UPDATE made the commit's key check wait
            tracked = Run.objects.create(
                project=world.project_a, experiment=exp, name="trial", source_pipeline_run=run, artifact_uri="x"
            )
        assert Run.objects.filter(pk=tracked.pk, source_pipeline_run=run).exists()
    finally:
        done.set()
        thread.join(30)
        connections.close_all()


def test_two_advances_of_one_run_still_exclude_each_other(world, run):
    sql = the_advance_lock(run)
    done, locked = threading.Event(), threading.Event()
    thread = holding(sql, done, locked)
    try:
        assert locked.wait(30)
        nowait = sql.replace("SKIP LOCKED", "NOWAIT") if "SKIP LOCKED" in sql else sql + " NOWAIT"
        with (
            pytest.raises(OperationalError, match="could not obtain lock"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(nowait)
    finally:
        done.set()
        thread.join(30)
