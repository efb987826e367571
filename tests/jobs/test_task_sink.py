"""The agent-side sink of a task: lines are stored by a thread of their own, in order, exactly once, also
when the database refuses a batch for a while."""

from __future__ import annotations

import pytest
from django.db import DatabaseError

from apps.jobs import logs
from apps.jobs.models import LogLine, PipelineRun, TaskRun
from apps.jobs.runtime_hooks import TaskSink
from tests.factories import ProjectFactory, UserFactory


@pytest.fixture
def task(transactional_db):
    owner = UserFactory(username="alice")
    run = PipelineRun.objects.create(project=ProjectFactory(owner=owner), pipeline_name="p", number=1)
    return TaskRun.objects.create(run=run, node="train")


def stored(task: TaskRun) -> list[tuple[int, str, str]]:
    return list(LogLine.objects.filter(task=task).order_by("seq").values_list("seq", "stream", "text"))


def test_lines_are_stored_in_order_once_closed(task):
    sink = TaskSink(task)
    sink.write_many("0", "stdout", [f"line {i}" for i in range(2500)])
    sink.write_many("0", "stderr", ["oops"])
    sink.close()
    rows = stored(task)
    assert [seq for seq, _s, _t in rows] == list(range(1, 2502))
    assert rows[0] == (1, "stdout", "line 0")
    assert rows[-1] == (2501, "stderr", "oops")


def test_a_refused_batch_is_stored_later_without_gaps_or_duplicates(task, monkeypatch):
    real_insert = logs.insert_lines
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise DatabaseError("the database went away")
        return real_insert(*args, **kwargs)

    monkeypatch.setattr(logs, "insert_lines", flaky)
    monkeypatch.setattr(TaskSink, "RETRY_SECONDS", 0.01)
    sink = TaskSink(task)
    sink.write_many("0", "stdout", [f"a{i}" for i in range(1200)])  # over max_lines: flushed at once, refused
    sink.write_many("0", "stdout", ["b"])
    sink.close()
    texts = [text for _seq, _stream, text in stored(task)]
    assert texts == [f"a{i}" for i in range(1200)] + ["b"]
    assert calls["n"] >= 2
