"""The log writer (batching, numbering, publishing) and reading stored lines back."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.jobs import logindex, logs
from apps.jobs.logs import (
    MAX_LINE_BYTES,
    LogWriter,
    backlog,
    first_error,
    iter_text,
    row_dict,
    run_log_group,
    search,
)
from apps.jobs.models import LogChunk, LogLine, PipelineRun, TaskRun
from tests.jobs.indexing import InlineIndexer

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def run(world) -> PipelineRun:
    return PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=7)


@pytest.fixture
def task(run) -> TaskRun:
    return TaskRun.objects.create(run=run, node="fit", attempt=2)


@pytest.fixture
def published(monkeypatch) -> list[tuple[int, list[dict]]]:
    """Every batch the writer publishes, rows as dicts (on commit: the test's transaction never commits, so run
    them now)."""
    calls: list[tuple[int, list[dict]]] = []
    monkeypatch.setattr(
        logs, "publish_lines", lambda run_id, rows: calls.append((run_id, [row_dict(row) for row in rows]))
    )
    monkeypatch.setattr(logs.transaction, "on_commit", lambda func, *args, **kwargs: func())
    return calls


def stored(task: TaskRun) -> list[LogLine]:
    return list(LogLine.objects.filter(task=task).order_by("seq"))


def write_lines(writer: LogWriter, texts: list[str], replica: str = "0", stream: str = "stdout") -> None:
    for i, text in enumerate(texts):
        writer.write(replica, stream, text, ts=T0 + timedelta(seconds=i))


# --- writer -------------------------------------------------------------------------------------


def test_it_flushes_when_max_lines_are_pending(task, published):
    writer = LogWriter(task)
    writer.max_delay = 60
    write_lines(writer, [f"line {i}" for i in range(writer.max_lines - 1)])
    assert stored(task) == []
    writer.write("0", "stdout", f"line {writer.max_lines - 1}")
    assert len(stored(task)) == writer.max_lines
    assert writer.pending == 0
    assert len(published) == 1
    assert len(published[0][1]) == writer.max_lines


def test_lines_read_together_share_their_timestamp_and_are_numbered_in_order(task, published):
    writer = LogWriter(task)
    writer.write_many("0", "stdout", ["a\tb", "back\\slash", "ünïcode", b"bytes\r\n"])
    writer.close()
    rows = stored(task)
    assert [r.text for r in rows] == ["a\tb", "back\\slash", "ünïcode", "bytes"]
    assert [r.seq for r in rows] == [1, 2, 3, 4]
    assert len({r.ts for r in rows}) == 1


def test_it_flushes_once_the_first_pending_line_is_100_ms_old(task, published):
    now = [1000.0]
    writer = LogWriter(task)
    writer.clock = lambda: now[0]
    writer.write("0", "stdout", "first")
    now[0] += 0.06
    writer.write("0", "stdout", "second")
    assert writer.flush_if_due() == 0
    assert stored(task) == []
    now[0] += 0.06
    assert writer.flush_if_due() == 2
    assert [line.text for line in stored(task)] == ["first", "second"]
    # The clock starts again with the next first pending line; a write that finds it due flushes too.
    writer.write("0", "stdout", "third")
    now[0] += 0.2
    writer.write("0", "stdout", "fourth")
    assert [line.text for line in stored(task)] == ["first", "second", "third", "fourth"]
    assert len(published) == 2


def test_seq_is_contiguous_per_task_across_flushes_and_writers(run, task, published):
    other = TaskRun.objects.create(run=run, node="eval")
    fit, evaluate = LogWriter(task), LogWriter(other)
    for i in range(1203):
        fit.write(str(i % 3), "stdout" if i % 2 else "stderr", f"fit {i}")
        if i % 2:
            evaluate.write("0", "stdout", f"eval {i}")
        if i % 250 == 0:
            fit.flush()
    fit.close()
    evaluate.close()
    # A restarted agent numbers on.
    with LogWriter(task) as again:
        again.write("0", "stdout", "after restart")

    assert [line.seq for line in stored(task)] == list(range(1, 1205))
    assert [line.seq for line in stored(other)] == list(range(1, 602))
    assert stored(task)[-1].text == "after restart"
    line = stored(task)[0]
    assert (line.node, line.attempt, line.run_id) == ("fit", 2, run.pk)


def test_a_flush_is_one_insert_transaction_and_one_message_with_the_stored_ids(task, published):
    writer = LogWriter(task)
    write_lines(writer, ["a", "b", "c"])
    writer.write("1", "stderr", "d")
    assert writer.flush() == 4

    [(run_id, lines)] = published
    assert run_id == task.run_id
    rows = stored(task)
    assert [line["id"] for line in lines] == [row.pk for row in rows]
    assert lines[0] == {
        "id": rows[0].pk,
        "task": task.pk,
        "node": "fit",
        "attempt": 2,
        "replica": "0",
        "seq": 1,
        "ts": T0.isoformat(),
        "stream": "stdout",
        "text": "a",
    }
    assert (lines[3]["replica"], lines[3]["stream"], lines[3]["seq"]) == ("1", "stderr", 4)


def test_the_batch_reaches_the_runs_group_through_the_channel_layer(task, settings, django_capture_on_commit_callbacks):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(run_log_group(task.run_id), channel)
    with django_capture_on_commit_callbacks(execute=True), LogWriter(task) as writer:
        write_lines(writer, ["one", "two"])
    message = async_to_sync(layer.receive)(channel)
    assert message["type"] == "log.lines"
    lines = [row_dict(row) for row in message["rows"]]
    assert [line["text"] for line in lines] == ["one", "two"]
    assert [line["id"] for line in lines] == [row.pk for row in stored(task)]


def test_a_publishing_failure_keeps_the_stored_lines(task, monkeypatch, caplog, django_capture_on_commit_callbacks):
    def broken_publish(group, message):
        raise ConnectionError("layer down")

    monkeypatch.setattr(logs, "publish", broken_publish)
    with caplog.at_level(logging.ERROR, logger="apps.jobs.logs"), django_capture_on_commit_callbacks(execute=True):
        writer = LogWriter(task)
        write_lines(writer, ["kept"])
        assert writer.flush() == 1
    assert [line.text for line in stored(task)] == ["kept"]
    assert "they are stored" in caplog.text


def test_a_failed_insert_keeps_the_lines_and_leaves_no_gap(task, published, monkeypatch):
    writer = LogWriter(task)
    write_lines(writer, ["a", "b"])
    real_insert = logs.insert_lines

    def failing(*args, **kwargs):
        raise RuntimeError("database away")

    monkeypatch.setattr(logs, "insert_lines", failing)
    with pytest.raises(RuntimeError):
        writer.flush()
    assert writer.pending == 2
    monkeypatch.setattr(logs, "insert_lines", real_insert)
    writer.write("0", "stdout", "c")
    writer.close()
    assert [(line.seq, line.text) for line in stored(task)] == [(1, "a"), (2, "b"), (3, "c")]
    assert published == [(task.run_id, published[0][1])]


def test_lines_lose_their_newline_and_are_capped_at_16_kib(task, published):
    with LogWriter(task) as writer:
        writer.write("0", "stdout", "plain\n")
        writer.write("0", "stdout", "windows\r\n")
        writer.write("0", "stdout", "é" * MAX_LINE_BYTES)  # 2 bytes each: cut on a character boundary
        writer.write("0", "stdout", b"bytes\x00too\n")
        writer.write("0", "stdout", "bad \udcff surrogate")
    texts = [line.text for line in stored(task)]
    assert texts[:2] == ["plain", "windows"]
    assert texts[2] == "é" * (MAX_LINE_BYTES // 2)
    assert texts[3] == "bytes\ufffdtoo"
    assert texts[4] == "bad ? surrogate"


@pytest.mark.parametrize(
    "texts",
    [
        ["inner\nbreak", "plain"],  # the only character to escape is a line break inside one text
        ["a\tb", "c\\d", "carriage\rreturn", "plain"],
        ["no escapes at all", "", "  "],
    ],
)
def test_texts_are_stored_exactly_as_written(task, published, texts):
    with LogWriter(task) as writer:
        writer.write_many("tab\treplica", "stdout", texts)
    assert [(line.replica, line.text) for line in stored(task)] == [("tab\treplica", text) for text in texts]


def test_it_refuses_unknown_streams_and_writes_after_close(task):
    writer = LogWriter(task)
    with pytest.raises(ValueError, match="stream"):
        writer.write("0", "stdlog", "x")
    with pytest.raises(ValueError, match="replica"):
        writer.write("r" * 51, "stdout", "x")
    writer.close()
    with pytest.raises(RuntimeError):
        writer.write("0", "stdout", "x")


# --- reading ------------------------------------------------------------------------------------


@pytest.fixture
def two_tasks(run, published) -> tuple[TaskRun, TaskRun]:
    fit = TaskRun.objects.create(run=run, node="fit")
    evaluate = TaskRun.objects.create(run=run, node="eval")
    with LogWriter(fit) as a, LogWriter(evaluate) as b:
        a.write("0", "stdout", "loading data", ts=T0)
        a.write("1", "stdout", "epoch 1 loss 0.3", ts=T0 + timedelta(seconds=1))
        a.flush()
        b.write("0", "stdout", "evaluating", ts=T0 + timedelta(seconds=2))
        b.flush()
        a.write("0", "stderr", "Traceback (most recent call last):", ts=T0 + timedelta(seconds=3))
        a.write("1", "stderr", "ValueError: bad input", ts=T0 + timedelta(seconds=4))
        a.flush()
        b.write("0", "stdout", "Error rate 0.1", ts=T0 + timedelta(seconds=5))
    return fit, evaluate


def test_backlog_returns_lines_in_storage_order_with_filters(run, two_tasks):
    fit, evaluate = two_tasks
    everything = backlog(run)
    assert [line["text"] for line in everything] == [
        "loading data",
        "epoch 1 loss 0.3",
        "evaluating",
        "Traceback (most recent call last):",
        "ValueError: bad input",
        "Error rate 0.1",
    ]
    ids = [line["id"] for line in everything]
    assert ids == sorted(ids)
    assert [line["text"] for line in backlog(run, after_id=ids[2])] == [line["text"] for line in everything[3:]]
    assert [line["node"] for line in backlog(run.pk, task_ids=[evaluate.pk])] == ["eval", "eval"]
    assert [line["text"] for line in backlog(run, task_ids=[fit.pk], replica="1")] == [
        "epoch 1 loss 0.3",
        "ValueError: bad input",
    ]
    assert backlog(run, task_ids=[]) == []
    assert len(backlog(run, limit=2)) == 2
    assert everything[0]["ts"] == T0.isoformat()


def test_backlog_never_mixes_in_another_runs_lines(world, run, two_tasks, published):
    other_run = PipelineRun.objects.create(project=world.project_b, pipeline_name="other", number=1)
    with LogWriter(TaskRun.objects.create(run=other_run, node="fit")) as writer:
        writer.write("0", "stdout", "secret error")
    assert "secret error" not in [line["text"] for line in backlog(run)]
    assert search(run, "secret") == []


def test_search_ignores_case_keeps_order_and_filters_by_node(run, two_tasks):
    assert [line["text"] for line in search(run, "ERROR")] == ["ValueError: bad input", "Error rate 0.1"]
    assert [line["text"] for line in search(run, "error", node="eval")] == ["Error rate 0.1"]
    assert [line["text"] for line in search(run, "in", limit=2)] == ["loading data", "evaluating"]
    assert search(run, "nothing like this") == []


# What `search` must match exactly as the plain `icontains` scan does, index or not: case (ASCII and not),
# LIKE wildcards and the escape character taken literally, FTS5 syntax (quotes) taken literally, keywords
# shorter than a trigram, several matches on one line, whitespace.
SEARCH_TEXTS = [
    "Loss 0.5 at step 1",
    "100% done",
    "50%_off sale",
    'say "hi" twice: "hi"',
    r"C:\path\to\file",
    "naïve café",
    "CAFÉ AU LAIT",
    "ΣΊΣΥΦΟΣ and σίσυφος",
    "a_b_c",
    "ab",
    "tab\tseparated  spaces",
    "loss loss LOSS",
]
SEARCH_KEYWORDS = [
    "loss", "LOSS", "Loss 0", "0% d", "%", "_", "%_o", "a_b", '"hi"', '"', 'y "h', "\\path", "\\", "café", "CAFÉ",
    "É", "ΣΥΦ", "σίσ", "ab", "b", "ted  sp", "\tsep", "nothing", "ss lo", "step 1",
]  # fmt: skip


@pytest.fixture(params=["stored", "indexed", "scanned"])
def search_lines(request, task, published, monkeypatch) -> list[str]:
    """The texts stored. "indexed": in chunks of two, so search reads them through the index (PostgreSQL: pg_trgm,
    SQLite: FTS5); "stored": not in chunks yet, found by reading their attempt's lines (the tail,
    apps/jobs/logindex.py); "scanned": found by the first look at the run's lines, which holds them all
    (logs.PROBE_LINES)."""
    postgresql = connection.vendor == "postgresql"
    if request.param != "scanned":
        monkeypatch.setattr(logs, "PROBE_LINES", 0)  # straight to the index, however few the lines
        monkeypatch.setattr(logs, "SPANS_SHARE", 0)  # SQLite: the spans' lines, however many of the run's they are
    indexed = request.param == "indexed" and (postgresql or logindex.fts_in_sync("default"))
    indexer = InlineIndexer(chunk_lines=2) if indexed else None
    with LogWriter(task, indexer=indexer) as writer:
        for text in SEARCH_TEXTS:
            writer.write("0", "stdout", text, ts=T0)
            writer.flush()
    if indexer is not None:
        assert LogChunk.objects.filter(task=task).count() == (len(SEARCH_TEXTS) + 1) // 2
    return SEARCH_TEXTS


def scanned(run: PipelineRun, q: str) -> list[str]:
    return list(LogLine.objects.filter(run=run, text__icontains=q).order_by("pk").values_list("text", flat=True))


@pytest.mark.parametrize("q", SEARCH_KEYWORDS)
def test_search_finds_what_a_case_insensitive_substring_scan_finds(run, search_lines, q):
    assert [line["text"] for line in search(run, q)] == scanned(run, q)


def test_search_results_do_not_depend_on_the_vendor_for_ascii_keywords(run, search_lines):
    assert [line["text"] for line in search(run, "LOSS")] == ["Loss 0.5 at step 1", "loss loss LOSS"]
    assert [line["text"] for line in search(run, "%_o")] == ["50%_off sale"]
    assert [line["text"] for line in search(run, '"hi"')] == ['say "hi" twice: "hi"']
    assert [line["text"] for line in search(run, "\\path")] == [r"C:\path\to\file"]
    assert [line["text"] for line in search(run, "AB")] == ["ab", "tab\tseparated  spaces"]
    assert [line["text"] for line in search(run, "ted  sp")] == ["tab\tseparated  spaces"]


def test_search_respects_the_limit_and_order_with_many_matches(run, task, published):
    with LogWriter(task) as writer:
        write_lines(writer, [f"step {i} Loss {i}" if i % 3 else f"step {i}" for i in range(1200)])
    found = search(run, "LOSS", limit=500)
    assert [line["text"] for line in found] == [f"step {i} Loss {i}" for i in range(1200) if i % 3][:500]


@pytest.mark.parametrize("search_lines", ["indexed"], indirect=True)
def test_search_uses_the_text_index_for_keywords_of_three_characters(run, search_lines):
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
            if cursor.fetchone() is None:
                pytest.skip("pg_trgm is not available: the migration skips the index")
        # The chunks that may hold the keyword come from an index, then only their lines are read, with ILIKE.
        with CaptureQueriesContext(connection) as queries:
            assert [line["text"] for line in search(run, "café")] == ["naïve café", "CAFÉ AU LAIT"]
        chunks = next(query["sql"] for query in queries.captured_queries if "FROM jobs_logchunk" in query["sql"])
        assert "LIKE lower('%café%')" in chunks
        chunks = chunks.split("jit = off; ", 1)[1].split("; ROLLBACK TO SAVEPOINT")[0]  # the query alone
        # A run of 300 more chunks: the trigram index is what finds the one with the keyword.
        task = TaskRun.objects.get(run=run)
        filler = "\n".join(f"step {i} loss 0.{i}" for i in range(1000))
        LogChunk.objects.bulk_create(
            LogChunk(run_id=run.pk, task=task, first_seq=i, last_seq=i, first_id=i, last_id=i, text=filler)
            for i in range(100, 400)
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE jobs_logchunk")
            explained = logindex.planned(cursor, f"EXPLAIN {chunks}", None, enable_seqscan="off")
            plan = "\n".join(row[0] for row in explained)
            cursor.execute("SELECT current_setting('enable_seqscan'), current_setting('jit')")
            assert cursor.fetchone() == ("on", "on")  # restored for the rest of the transaction
        assert "jobs_logchunk_text_trgm" in plan
        read = 'lower("jobs_logline"."text") LIKE lower(\'%café%\')'  # the lines, ILIKE as PostgreSQL does it
        assert any(read in query["sql"] for query in queries.captured_queries)
    elif connection.vendor == "sqlite":
        if not logindex.fts_in_sync("default"):
            pytest.skip("SQLite without FTS5 trigram support: the migration skips the table")
        # The chunks that may hold the keyword come from the FTS5 table, then only their lines are read; a keyword
        # shorter than a trigram is scanned.
        with CaptureQueriesContext(connection) as queries:
            assert [line["text"] for line in search(run, "café")] == ["naïve café"]  # LIKE folds ASCII only
        statements = [query["sql"] for query in queries.captured_queries]
        assert any(f"{logindex.FTS_TABLE} MATCH" in sql for sql in statements)
        assert any('FROM "jobs_logline"' in sql and '"seq" BETWEEN' in sql for sql in statements)
        with CaptureQueriesContext(connection) as queries:
            assert [line["text"] for line in search(run, "ab")] == ["ab", "tab\tseparated  spaces"]
        assert not any("MATCH" in query["sql"] for query in queries.captured_queries)


@pytest.fixture
def sqlite_fts():
    if connection.vendor != "sqlite":
        pytest.skip("the FTS5 table exists on SQLite only")
    if not logindex.fts_in_sync("default"):
        pytest.skip("SQLite without FTS5 trigram support")
    return connection


def fts_count(connection, q: str) -> int:
    """Chunks whose FTS5 entry holds `q`."""
    table = logindex.FTS_TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {table} MATCH %s", [f'"{q}"'])
        return cursor.fetchone()[0]


@pytest.mark.parametrize("search_lines", ["indexed"], indirect=True)
def test_the_fts_table_follows_the_chunks(run, search_lines, sqlite_fts):
    assert fts_count(sqlite_fts, "café") == 2  # FTS5 folds all of Unicode: a superset of LIKE's matches
    assert fts_count(sqlite_fts, "lines") == 0
    LogChunk.objects.filter(text__contains="café").update(text="other lines")
    assert fts_count(sqlite_fts, "café") == 1
    assert fts_count(sqlite_fts, "lines") == 1
    run.delete()
    assert fts_count(sqlite_fts, "café") == 0
    assert fts_count(sqlite_fts, "lines") == 0


def test_search_scans_when_the_fts_triggers_are_gone(run, task, published, sqlite_fts):
    # What a later migration that rebuilds jobs_logchunk leaves behind: the FTS table without its triggers.
    with sqlite_fts.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {logindex.FTS_TRIGGERS[0]}")
    with LogWriter(task, indexer=InlineIndexer(chunk_lines=2)) as writer:
        writer.write("0", "stdout", "written after the triggers went")
    assert LogChunk.objects.filter(task=task).count() == 1
    assert fts_count(sqlite_fts, "triggers") == 0
    assert [line["text"] for line in search(run, "TRIGGERS")] == ["written after the triggers went"]


def test_first_error_is_the_first_line_that_mentions_one(run, two_tasks):
    line = first_error(run)
    assert line is not None
    assert (line["text"], line["stream"], line["node"]) == ("Traceback (most recent call last):", "stderr", "fit")


def test_first_error_is_none_for_a_clean_log(task, published):
    with LogWriter(task) as writer:
        writer.write("0", "stdout", "all good")
        writer.write("0", "stderr", "a warning on stderr")
    assert first_error(task.run_id) is None


def test_iter_text_formats_every_line_for_download(run, two_tasks):
    text = "".join(iter_text(run))
    assert text.splitlines()[0] == f"{T0.isoformat()} [fit#1/0] loading data"
    assert text.splitlines()[4] == f"{(T0 + timedelta(seconds=4)).isoformat()} [fit#1/1] ValueError: bad input"
    assert len(text.splitlines()) == 6
    assert text.endswith("Error rate 0.1\n")
    assert list(iter_text(run, node="eval")) == [
        f"{(T0 + timedelta(seconds=2)).isoformat()} [eval#1/0] evaluating\n",
        f"{(T0 + timedelta(seconds=5)).isoformat()} [eval#1/0] Error rate 0.1\n",
    ]


def test_the_async_and_chunked_downloads_match_iter_text(run, two_tasks, monkeypatch):
    monkeypatch.setattr(logs, "TEXT_CHUNK_LINES", 4)

    async def read_all() -> list[str]:
        return [chunk async for chunk in logs.aiter_text(run)]

    chunks = async_to_sync(read_all)()
    assert "".join(chunks) == "".join(iter_text(run))
    assert len(chunks) == 2
    assert list(logs.join_chunks(iter_text(run), size=4)) == chunks
