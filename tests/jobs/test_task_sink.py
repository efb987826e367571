"""The agent-side sink of a task: lines are stored by a thread of their own, in order, exactly once, also
when the database refuses a batch for a while."""

from __future__ import annotations

import itertools
import time

import pytest
from django.db import DatabaseError

from apps.jobs import logindex, logs
from apps.jobs.models import LogChunk, LogLine, PipelineRun, TaskRun
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


def test_the_agents_indexer_puts_every_stored_line_in_a_chunk_on_its_own_thread(task):
    if logindex.shared_indexer() is None:
        pytest.skip("SQLite without FTS5 trigram support: no text index, search scans")
    total = 3 * logindex.CHUNK_LINES + 500
    sink = TaskSink(task)
    for start in range(0, total, 500):
        sink.write_many("0", "stdout", [f"step {i} Loss {i}" for i in range(start, start + 500)])
    sink.close()  # the attempt's last lines are indexed without waiting for CHUNK_SECONDS
    deadline = time.monotonic() + 10
    while not LogChunk.objects.filter(task=task, last_seq=total).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    spans = list(LogChunk.objects.filter(task=task).order_by("first_seq").values_list("first_seq", "last_seq"))
    assert spans[0][0] == 1
    assert spans[-1][1] == total
    assert len(spans) >= 3
    assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(spans))  # no hole, no overlap
    assert LogChunk.objects.get(task=task, first_seq=1).text.startswith("step 0 loss 0\nstep 1 loss 1\n")
    assert [line["seq"] for line in logs.search(task.run, "LOSS 1234")] == [1235]


def test_samples_are_stored_per_replica_with_their_gpu_and_a_warning_at_once(task):
    from apps.jobs.models import ResourceSample

    sink = TaskSink(task, memory_limit=100 * 2**20, replicas=2)
    sink.sample(150.0, 50 * 2**20, replica="master-0", gpu_percent=88.04, gpu_memory_bytes=2**30)
    sink.sample(99.0, 95 * 2**20, replica="worker-0", gpu_percent=None, gpu_memory_bytes=None)
    task.refresh_from_db()
    assert [(w["kind"], w["replica"]) for w in task.resource_warnings] == [("memory_near_limit", "worker-0")]
    assert not ResourceSample.objects.filter(task=task).exists()  # samples wait for a batch; the warning did not
    sink.close()
    rows = ResourceSample.objects.filter(task=task).order_by("replica")
    assert [(r.replica, r.cpu_percent, r.rss_bytes, r.gpu_percent, r.gpu_memory_bytes) for r in rows] == [
        ("master-0", 150.0, 50 * 2**20, 88.0, 2**30),
        ("worker-0", 99.0, 95 * 2**20, None, None),
    ]
