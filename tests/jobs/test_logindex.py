"""The text index of log lines: chunks of an attempt's lines written after they are live, and search over the chunks
plus the lines not in one yet (apps/jobs/logindex.py). PostgreSQL indexes the chunks with pg_trgm, SQLite with an
FTS5 table (jobs.0017)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from apps.jobs import logindex, logs
from apps.jobs.logindex import ChunkIndexer, Piece
from apps.jobs.logs import LogWriter, first_error, search
from apps.jobs.models import LogChunk, LogLine, PipelineRun, TaskRun
from tests.jobs.indexing import InlineIndexer


@pytest.fixture
def run(world) -> PipelineRun:
    if connection.vendor == "sqlite" and not logindex.fts_in_sync("default"):
        pytest.skip("SQLite without FTS5 trigram support: the migration makes no index, search scans")
    return PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=3)


@pytest.fixture
def fit(run) -> TaskRun:
    return TaskRun.objects.create(run=run, node="fit")


@pytest.fixture(autouse=True)
def at_once(monkeypatch):
    """The test's transaction never commits: run what waits for the commit (publish, index) now."""
    monkeypatch.setattr(logs, "publish_lines", lambda run_id, rows: None)
    monkeypatch.setattr(logs.transaction, "on_commit", lambda func, *args, **kwargs: func())


def chunks(task: TaskRun) -> list[tuple[int, int, str]]:
    return list(LogChunk.objects.filter(task=task).order_by("first_seq").values_list("first_seq", "last_seq", "text"))


def texts(found: list[dict]) -> list[str]:
    return [line["text"] for line in found]


def scanned(run: PipelineRun, q: str) -> list[str]:
    return list(LogLine.objects.filter(run=run, text__icontains=q).order_by("pk").values_list("text", flat=True))


def test_an_attempts_batches_are_gathered_into_lower_cased_chunks(run, fit):
    writer = LogWriter(fit, indexer=InlineIndexer(chunk_lines=3))
    writer.write_many("0", "stdout", ["Epoch 1 LOSS 0.5", "Ünïcode ÄÖ"])
    writer.flush()
    writer.write_many("0", "stdout", ["Epoch 2", "LOSS 0.4"])
    writer.flush()
    writer.write("0", "stderr", "Last")
    assert chunks(fit) == []  # the task is still printing: it has the database to itself
    writer.close()  # it ended: its batches become chunks of at least 3 lines, the last one smaller
    # Lower-cased by the database's lower(): SQLite's folds ASCII only, which its FTS5 index does not need.
    unicode = "ünïcode äö" if connection.vendor == "postgresql" else "Ünïcode ÄÖ"
    assert chunks(fit) == [(1, 4, f"epoch 1 loss 0.5\n{unicode}\nepoch 2\nloss 0.4"), (5, 5, "last")]
    ids = list(LogLine.objects.filter(task=fit).order_by("seq").values_list("pk", flat=True))
    first = LogChunk.objects.get(task=fit, first_seq=1)
    assert (first.run_id, first.first_id, first.last_id) == (run.pk, ids[0], ids[3])
    run.delete()  # chunks go with their tasks
    assert not LogChunk.objects.exists()


def piece(task_id: int, first_seq: int, lines: int = 1, chars: int = 1) -> Piece:
    text = "\n".join(["x" * chars] * lines)
    return Piece(1, task_id, first_seq, first_seq + lines - 1, first_seq + 100, first_seq + 100 + lines - 1, text)


def spans(chunks: list[LogChunk]) -> list[tuple[int, int, int]]:
    return [(chunk.task_id, chunk.first_seq, chunk.last_seq) for chunk in chunks]


def test_a_tasks_lines_are_indexed_once_it_pauses_or_ends_or_has_waited_too_long():
    indexer = ChunkIndexer(chunk_lines=1000, quiet=0.5, max_wait=10.0)
    assert indexer.take(piece(7, 1, lines=3), now=100.0) == []
    assert indexer.take(piece(7, 4, lines=2), now=100.4) == []  # still printing
    assert spans(indexer.take(None, now=100.9)) == [(7, 1, 5)]  # quiet for half a second
    assert indexer.take(None, now=101.0) == []
    for i in range(25):  # printing without a pause: indexed after 10 s all the same
        assert indexer.take(piece(8, i + 1), now=200.0 + i * 0.4) == []
    assert spans(indexer.take(piece(8, 26), now=210.0)) == [(8, 1, 26)]
    assert indexer.take(piece(9, 1), now=300.0) == []
    assert spans(indexer.take(9, now=300.1)) == [(9, 1, 1)]  # it ended


def test_too_much_waiting_text_indexes_the_task_holding_most():
    indexer = ChunkIndexer(chunk_lines=2, quiet=60, max_wait=60, max_chars=100)
    assert indexer.take(piece(1, 1, chars=40), now=0) == []
    assert indexer.take(piece(2, 1, chars=30), now=0) == []
    assert indexer.take(piece(1, 2, chars=20), now=0) == []
    assert spans(indexer.take(piece(2, 2, chars=20), now=0)) == [(1, 1, 2)]  # 110 characters waited
    assert indexer.chars == 50


def test_pieces_become_chunks_of_at_least_chunk_lines_in_order():
    indexer = ChunkIndexer(chunk_lines=1000, quiet=60, max_wait=60)
    for first in range(1, 3001, 600):
        indexer.take(piece(5, first, lines=600), now=0)
    assert spans(indexer.take(5, now=0)) == [(5, 1, 1200), (5, 1201, 2400), (5, 2401, 3000)]


@pytest.mark.parametrize(
    ("first_spans", "probe", "max_spans", "share"),
    [(1, 0, 32, 0), (100, 0, 200, 0), (4, 3, 32, 0), (4, 20, 32, 0), (1, 0, 1, 0), (2, 0, 3, 0), (4, 3, 32, 3)],
)
def test_search_reads_chunks_and_the_lines_not_in_one_yet_once_each_in_order(
    run, fit, monkeypatch, first_spans, probe, max_spans, share
):
    """`probe`: lines read before the index is asked (none: the index at once); a keyword found there reads on.
    `max_spans`: the most spans one query reads (the next ones read the rest). `share` (SQLite): the spans are read
    when less than 1/share of the run's lines, else the lines are scanned (0: always the spans)."""
    monkeypatch.setattr(logs, "SPANS_SHARE", share)
    monkeypatch.setattr(logs, "FIRST_SPANS", first_spans)
    monkeypatch.setattr(logs, "MAX_SPANS", max_spans)
    monkeypatch.setattr(logs, "PROBE_LINES", probe)
    monkeypatch.setattr(logs, "CHUNK_LINES", 10)
    evaluate = TaskRun.objects.create(run=run, node="eval")
    unindexed = TaskRun.objects.create(run=run, node="report")
    indexer = InlineIndexer(chunk_lines=10)
    with LogWriter(fit, indexer=indexer) as a, LogWriter(evaluate, indexer=indexer) as b, LogWriter(unindexed) as c:
        for i in range(35):  # the three tasks store in turn: each chunk's ids span the others' lines
            a.write("0", "stdout", f"fit step {i} loss {i}")
            if i % 5 == 4:
                a.flush()
                b.write("0", "stdout", f"eval after {i}: loss")
                b.flush()
                c.write("0", "stdout", f"report {i}: Loss")
                c.flush()
            if i == 29:  # fit and eval pause: what they stored so far is indexed
                indexer.index_pending()
        assert [(first, last) for first, last, _text in chunks(fit)] == [(1, 10), (11, 20), (21, 30)]
        assert chunks(unindexed) == []
        # fit's last 5 lines and eval's 7 and report's 7 are in no chunk: found all the same
        expected = scanned(run, "loss")
        assert len(expected) == 35 + 7 + 7
        assert texts(search(run, "LOSS")) == expected
        assert texts(search(run, "loss", limit=12)) == expected[:12]
        assert texts(search(run, "loss", node="eval")) == [f"eval after {i}: loss" for i in range(4, 35, 5)]
        assert texts(search(run, "step 33")) == ["fit step 33 loss 33"]
        assert texts(search(run, "step 3 ")) == ["fit step 3 loss 3"]
        assert texts(search(run, "report 19")) == ["report 19: Loss"]
        assert search(run, "step 35") == []
    assert [(first, last) for first, last, _text in chunks(fit)][-1] == (31, 35)
    assert texts(search(run, "LOSS")) == expected


def test_the_lines_after_a_chunk_that_could_not_be_written_are_found_as_the_tail(run, fit, monkeypatch):
    monkeypatch.setattr(logs, "PROBE_LINES", 0)
    monkeypatch.setattr(logs, "SPANS_SHARE", 0)
    real_write = logindex.write_chunk
    calls = {"n": 0}

    def refused_second(chunk):
        calls["n"] += 1
        if chunk.first_seq == 3:
            raise DatabaseError("the database went away")
        real_write(chunk)

    monkeypatch.setattr(logindex, "write_chunk", refused_second)
    monkeypatch.setattr(ChunkIndexer, "RETRY_SECONDS", 0.0)
    monkeypatch.setattr(logindex.connection, "close", lambda: None)  # the test's connection holds its transaction
    indexer = InlineIndexer(chunk_lines=2)
    with LogWriter(fit, indexer=indexer) as writer:
        for i in range(8):
            writer.write("0", "stdout", f"epoch {i}: error rate {i}")
            writer.flush()
            if i == 1:
                indexer.index_pending()  # lines 1-2: one chunk
    # Lines 3-8 were due together, in one transaction that kept failing at lines 3-4: none of their chunks is
    # written, nor any later one. Lines 3-8 are the tail.
    assert [(first, last) for first, last, _text in chunks(fit)] == [(1, 2)]
    assert calls["n"] == logindex.WRITE_ATTEMPTS + 1
    assert texts(search(run, "ERROR RATE")) == [f"epoch {i}: error rate {i}" for i in range(8)]
    assert texts(search(run, "epoch 5")) == ["epoch 5: error rate 5"]


def test_first_error_is_found_in_chunks_and_tails(run, fit):
    indexer = InlineIndexer(chunk_lines=100)
    with LogWriter(fit, indexer=indexer) as writer:
        for batch in range(3):
            writer.write_many("0", "stdout", [f"batch {batch} line {i}" for i in range(100)])
            writer.flush()
        indexer.index_pending()
        writer.write("0", "stderr", "RuntimeError: CUDA out of memory")
        writer.flush()
        assert LogChunk.objects.filter(task=fit).count() == 3
        assert first_error(run)["text"] == "RuntimeError: CUDA out of memory"  # in the tail
        writer.write("0", "stdout", "an Exception later")
    assert LogChunk.objects.filter(task=fit).count() == 4
    assert first_error(run)["text"] == "RuntimeError: CUDA out of memory"  # in a chunk


def test_search_of_a_run_without_lines_finds_nothing(run, fit):
    assert search(run, "anything") == []
    assert first_error(run) is None


@pytest.mark.parametrize("probe", [1, 5, 11, 12, 13, 40])
@pytest.mark.parametrize(("q", "limit"), [("loss", 500), ("loss", 3), ("step 1", 500), ("xx", 500), ("sTeP 11 ", 1)])
def test_the_probe_reads_its_window_in_one_statement_and_finds_what_the_scan_finds(
    run, fit, monkeypatch, probe, q, limit
):
    """12 lines, every third with `loss`: a window shorter than the run, as long, longer; a page filled in it or not;
    the window's last line matching (probe 12 with "loss") or not."""
    monkeypatch.setattr(logs, "PROBE_LINES", probe)
    with LogWriter(fit) as writer:
        for i in range(12):
            writer.write("0", "stdout", f"step {i}" + (" loss" if i % 3 == 2 else "") + " ")
    with CaptureQueriesContext(connection) as queries:
        found = search(run, q, limit=limit)
    assert texts(found) == scanned(run, q)[:limit]
    if connection.vendor != "postgresql":
        return
    statements = [query["sql"] for query in queries.captured_queries]
    windows = [sql for sql in statements if f"> ({run.pk}, 0)" in sql]  # the run's lines from its first, in id order
    assert len(windows) == 1  # the probe's window, read by one statement


def fts_rows() -> int:
    """Entries of SQLite's FTS5 table of chunks (its docsize table holds one per indexed chunk)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {logindex.FTS_TABLE}_docsize")
        return cursor.fetchone()[0]


@pytest.fixture
def indexed_at_once(monkeypatch):
    """Search asks the index however few the lines: no probe of the run's first lines, and (SQLite) the spans' lines
    read however many of the run's they are."""
    monkeypatch.setattr(logs, "PROBE_LINES", 0)
    monkeypatch.setattr(logs, "SPANS_SHARE", 0)


def test_a_line_is_found_before_and_after_it_is_indexed(run, fit, indexed_at_once):
    indexer = InlineIndexer(chunk_lines=2)
    with LogWriter(fit, indexer=indexer) as writer:
        writer.write_many("0", "stdout", ["Epoch 1 loss 0.5", "CUDA Out Of Memory", "Epoch 2 loss 0.4"])
        writer.flush()
        assert chunks(fit) == []
        assert texts(search(run, "out of memory")) == ["CUDA Out Of Memory"]  # in the tail
        indexer.index_pending()
        assert [(first, last) for first, last, _text in chunks(fit)] == [(1, 3)]
        assert texts(search(run, "out of memory")) == ["CUDA Out Of Memory"]  # in a chunk
        assert texts(search(run, "LOSS")) == scanned(run, "loss") == ["Epoch 1 loss 0.5", "Epoch 2 loss 0.4"]
        first = LogLine.objects.get(task=fit, seq=1)
        assert texts(search(run, "loss", after_id=first.pk)) == ["Epoch 2 loss 0.4"]  # the API's next page
        assert texts(search(run, "loss", replica="1")) == []
        assert texts(search(run, "loss", task_id=fit.pk, limit=1)) == ["Epoch 1 loss 0.5"]
        if connection.vendor == "sqlite":
            with CaptureQueriesContext(connection) as queries:
                search(run, "memory")
            assert any(f"{logindex.FTS_TABLE} MATCH" in query["sql"] for query in queries.captured_queries)


def test_a_line_stored_while_the_index_is_behind_is_found_as_the_tail(run, fit, indexed_at_once):
    indexer = InlineIndexer(chunk_lines=2)
    with LogWriter(fit, indexer=indexer) as writer:
        for first in (0, 2):
            writer.write_many("0", "stdout", [f"step {i} loss" for i in range(first, first + 2)])
            writer.flush()
        indexer.index_pending()  # lines 1-4: two chunks
        writer.write_many("0", "stdout", ["step 4 loss", "late Traceback here"])
        writer.flush()  # not indexed yet: the indexer is behind
        assert [(first, last) for first, last, _text in chunks(fit)] == [(1, 2), (3, 4)]
        assert texts(search(run, "traceback")) == ["late Traceback here"]
        assert texts(search(run, "loss")) == [f"step {i} loss" for i in range(5)]
        assert texts(search(run, "step 4")) == ["step 4 loss"]
        assert first_error(run)["text"] == "late Traceback here"


def test_deleting_a_run_leaves_no_index_behind(run, fit, world, indexed_at_once):
    other = PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=4)
    kept = TaskRun.objects.create(run=other, node="fit")
    for task in (fit, kept):
        with LogWriter(task, indexer=InlineIndexer(chunk_lines=2)) as writer:
            for i in range(5):
                writer.write("0", "stdout", f"run {task.run_id} line {i} loss")
                writer.flush()
    assert LogChunk.objects.count() == 6  # of two lines each, the last of one
    if connection.vendor == "sqlite":
        assert fts_rows() == 6
    run_id = run.pk
    run.delete()
    assert not LogLine.objects.filter(run_id=run_id).exists()
    assert not LogChunk.objects.filter(run_id=run_id).exists()
    if connection.vendor == "sqlite":
        assert fts_rows() == 3  # the kept run's chunks only
    assert texts(search(other, "loss")) == [f"run {other.pk} line {i} loss" for i in range(5)]
