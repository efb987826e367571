"""The log pipeline of pipeline runs: the runtime agent's buffered writer, and reading stored lines back.

Every line is stored first and published second: a batch of lines is one INSERT transaction and then ONE
channel-layer message to `jobs.run.<run_id>.logs` (one message per line delivered ~750 lines/s and dropped
a third of them at the layer's default capacity; see real-services.md). Websocket consumers send the
stored backlog and then the published batches, deduplicated by the line's primary key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db.models import Max, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from apps.jobs.logindex import CHUNK_LINES, ChunkIndexer, Piece, Span, candidates, fts_in_sync, within
from apps.jobs.models import RUN_FINISHED, LogLine, PipelineRun, TaskRun
from apps.projects.secrets import MASK, mask_values
from apps.runtime.models import progress_marker
from portal.lib.publish import publish

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024
STREAMS = frozenset({"stdout", "stderr"})
REPLICA_MAX_LENGTH = 50
ERROR_WORDS = ("error", "exception", "traceback", "failed")
TEXT_CHUNK_LINES = 2000

# The columns of a line as sent to browsers; "task" is the TaskRun id.
_COLUMNS = ("id", "task_id", "node", "attempt", "replica", "seq", "ts", "stream", "text")
# Live batches and websocket messages carry lines as rows of these fields, in this order: a third of the
# bytes of dicts and a third of the encoding time at every hop (publish, layer, consumer, browser).
ROW_FIELDS = ("id", "task", "node", "attempt", "replica", "seq", "ts", "stream", "text")
ROW_ID, ROW_TASK, ROW_REPLICA, ROW_SEQ = 0, 1, 4, 5


def run_log_group(run_id: int) -> str:
    """The channel-layer group that receives a run's log batches (and its status messages)."""
    return f"jobs.run.{run_id}.logs"


def _run_id(run: PipelineRun | int) -> int:
    return run if isinstance(run, int) else run.pk


def line_dict(
    *, id: int, task_id: int, node: str, attempt: int, replica: str, seq: int, ts: datetime, stream: str, text: str
) -> dict[str, Any]:
    return {
        "id": id,
        "task": task_id,
        "node": node,
        "attempt": attempt,
        "replica": replica,
        "seq": seq,
        "ts": ts.isoformat(),
        "stream": stream,
        "text": text,
    }


def row_dict(row: list[Any] | tuple[Any, ...]) -> dict[str, Any]:
    """A line row (ROW_FIELDS order) as a dict."""
    return dict(zip(ROW_FIELDS, row, strict=True))


def clean_line(text: str | bytes) -> str:
    """One line as stored: without its trailing newline, valid UTF-8, no NUL, at most MAX_LINE_BYTES."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text.isascii() and len(text) <= MAX_LINE_BYTES and "\x00" not in text and not text.endswith(("\n", "\r")):
        return text  # the common case, checked in C
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    if "\x00" in text:  # PostgreSQL text cannot hold NUL; one such line would block every later batch
        text = text.replace("\x00", "\ufffd")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (surrogateescape-decoded output) cannot be stored either
        data = text.encode("utf-8", "replace")
        text = data.decode("utf-8")
    if len(data) > MAX_LINE_BYTES:
        text = data[:MAX_LINE_BYTES].decode("utf-8", "ignore")
    return text


def publish_lines(run_id: int, rows: list[list[Any]]) -> None:
    """Send one batch (rows in ROW_FIELDS order) to the run's group. Never raises: the lines are already
    stored, a browser catches up."""
    if not rows:
        return
    try:
        publish(run_log_group(run_id), {"type": "log.lines", "rows": rows})
    except Exception:
        logger.exception("Could not publish %d log lines of run %s; they are stored", len(rows), run_id)


_TABLE = LogLine._meta.db_table
_INSERT_COLUMNS = ("id", "run_id", "task_id", "node", "attempt", "replica", "seq", "ts", "stream", "text")


def insert_lines(task: TaskRun, first_seq: int, batch: list[tuple[str, datetime, str, str]], joined: str) -> list[int]:
    """Store a batch of one attempt's lines as raw rows (no model instances: this is the hot path) and
    return their ids; `joined` is their texts joined by newlines. PostgreSQL: ids from the sequence, then COPY;
    elsewhere one executemany. Call inside a transaction."""
    table = LogLine._meta.db_table
    n = len(batch)
    columns = ", ".join(_INSERT_COLUMNS)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # nextval() of the sequence as a regclass constant, resolved once when parsed: its name as text would
            # be looked up for every row (pg_get_serial_sequence() in this select list was a third of the
            # database's work of storing a line).
            cursor.execute("SELECT nextval(%s::regclass) FROM generate_series(1, %s)", [_id_sequence(cursor), n])
            ids = [row[0] for row in cursor.fetchall()]
            # Whether any text needs COPY's escapes, asked of them all at once (a line break beyond the n-1 joints)
            escape = "\\" in joined or "\t" in joined or "\r" in joined or joined.count("\n") >= n
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                copy.write(_copy_text(ids, task, first_seq, batch, escape=escape))
        else:  # SQLite: writers are serialised (IMMEDIATE transactions), so max(id) is ours to extend
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
            start = cursor.fetchone()[0] + 1
            ids = list(range(start, start + n))
            rows = [
                (line_id, task.run_id, task.pk, task.node, task.attempt, replica, first_seq + i, ts, stream, text)
                for i, (line_id, (replica, ts, stream, text)) in enumerate(zip(ids, batch, strict=True))
            ]
            placeholders = ", ".join(["%s"] * len(_INSERT_COLUMNS))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", rows)
    return ids


_sequences: dict[str, str] = {}


def _id_sequence(cursor) -> str:
    """The name of LogLine's id sequence on this cursor's database (PostgreSQL), looked up once per process."""
    alias = cursor.db.alias
    if alias not in _sequences:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [LogLine._meta.db_table])
        _sequences[alias] = cursor.fetchone()[0]
    return _sequences[alias]


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(
    ids: list[int], task: TaskRun, first_seq: int, batch: list[tuple[str, datetime, str, str]], *, escape: bool
) -> bytes:
    """The batch as rows of COPY's text format (_INSERT_COLUMNS), one f-string per row: psycopg's write_row
    works per value in Python. What the rows share is formatted once; the texts (clean lines: no NUL) are
    escaped only when `escape` says one holds a backslash, tab or line break."""
    shared = f"\t{task.run_id}\t{task.pk}\t{task.node.translate(_COPY_ESCAPES)}\t{task.attempt}\t"
    replicas: dict[str, str] = {}
    stamps: dict[datetime, str] = {}
    out = []
    seq = first_seq
    for line_id, (replica, ts, stream, text) in zip(ids, batch, strict=True):
        name = replicas.get(replica) or replicas.setdefault(replica, replica.translate(_COPY_ESCAPES))
        stamp = stamps.get(ts) or stamps.setdefault(ts, ts.isoformat())
        if escape:
            text = text.translate(_COPY_ESCAPES)
        out.append(f"{line_id}{shared}{name}\t{seq}\t{stamp}\t{stream}\t{text}\n")
        seq += 1
    return "".join(out).encode("utf-8")


class LogWriter:
    """Buffers the output of one TaskRun attempt and stores it in batches (used by the runtime agent).

    A batch is flushed when `max_lines` are pending, when `max_chars` of text are pending, or once
    `max_delay` seconds have passed since its first line: on the next `write()` or `flush_if_due()`, which
    the agent calls while its processes are quiet. `seq` continues from the attempt's stored lines, so a
    restarted agent numbers on without gaps. Thread-safe (stdout and stderr may be read by two threads).
    """

    max_lines = 1000
    max_delay = 0.1
    max_chars = 1024 * 1024  # 500 lines of up to 16 KiB would make an 8 MiB message
    clock = staticmethod(time.monotonic)

    def __init__(self, task: TaskRun, secrets: Iterable[str] = (), indexer: ChunkIndexer | None = None) -> None:
        self.task = task
        # Told of each stored batch, after it is published (logindex.shared_indexer()). Without one the lines are
        # found by scanning their attempt's lines (its tail).
        self.indexer = indexer
        # Values of the secrets injected into the task: replaced by *** before a line is stored or published.
        self._masks = mask_values(secrets)
        self._lock = threading.RLock()
        self._pending: list[tuple[str, datetime, str, str]] = []
        self._pending_chars = 0
        self._first_at: float | None = None
        self._closed = False
        self._next_seq: int | None = None  # read at the first flush: a task that prints nothing costs nothing

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def write(self, replica: str, stream: str, text: str | bytes, *, ts: datetime | None = None) -> None:
        """Queue one line of `replica`'s `stream` ("stdout" or "stderr")."""
        self.write_many(replica, stream, [text], ts=ts)

    def write_many(
        self, replica: str, stream: str, texts: Iterable[str | bytes], *, ts: datetime | None = None
    ) -> None:
        """Queue lines read together (they share one timestamp: the time they were read)."""
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        replica = str(replica)
        if len(replica) > REPLICA_MAX_LENGTH:
            raise ValueError(f"replica name longer than {REPLICA_MAX_LENGTH} characters")
        ts = ts or timezone.now()
        with self._lock:
            if self._closed:
                raise RuntimeError("LogWriter is closed")
            if self._masks:
                texts = self._masked(texts)
            # All queued before any flush: when storing fails, every line stays pending for the next try.
            for text in texts:
                text = clean_line(text)
                if not self._pending:
                    self._first_at = self.clock()
                # (replica, ts, stream, text): numbered when stored, so a failed insert leaves no gap
                self._pending.append((replica, ts, stream, text))
                self._pending_chars += len(text)
            if len(self._pending) >= self.max_lines or self._pending_chars >= self.max_chars:
                self.flush()
            else:
                self.flush_if_due()

    def _masked(self, texts: Iterable[str | bytes]) -> list[str]:
        """The lines with every secret value replaced by ***. One substring search per value over the whole
        chunk first (in C): a task that never prints its secrets pays ~2 µs per 1,000 lines and value, not a
        per-line loop. Masked before `clean_line` cuts a long line, so no cut can leave half a value behind."""
        texts = [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in texts]
        joined = "\n".join(texts)  # a mask never holds "\n" (multi-line values are masked line by line)
        hits = [value for value in self._masks if value in joined]
        if not hits:
            return texts
        masked = []
        for text in texts:
            for value in hits:
                if value in text:
                    text = text.replace(value, MASK)
            masked.append(text)
        return masked

    def flush_if_due(self) -> int:
        """Flush if the oldest pending line has waited `max_delay`; returns the number of lines stored."""
        with self._lock:
            if self._first_at is not None and self.clock() - self._first_at >= self.max_delay:
                return self.flush()
            return 0

    def flush(self) -> int:
        """Store the pending lines in one transaction, then publish them as one message."""
        with self._lock:
            batch = self._pending
            if not batch:
                return 0
            task = self.task
            if self._next_seq is None:
                last = LogLine.objects.filter(task_id=task.pk).aggregate(last=Max("seq"))["last"]
                self._next_seq = (last or 0) + 1
            first_seq = self._next_seq
            joined = "\n".join([text for *_, text in batch])  # for COPY's escapes and the indexer
            with progress_marker():  # on failure the lines stay pending for the next flush
                ids = insert_lines(task, first_seq, batch, joined)
            self._next_seq += len(batch)
            self._pending = []
            self._pending_chars = 0
            self._first_at = None
            task_id, node, attempt = task.pk, task.node, task.attempt
            stamps: dict[datetime, str] = {}  # lines read together share a timestamp: format it once
            rows = [
                [
                    line_id,
                    task_id,
                    node,
                    attempt,
                    replica,
                    first_seq + offset,
                    stamps.get(ts) or stamps.setdefault(ts, ts.isoformat()),
                    stream,
                    text,
                ]
                for offset, (line_id, (replica, ts, stream, text)) in enumerate(zip(ids, batch, strict=True))
            ]
            run_id = self.task.run_id
            # After the caller's transaction commits (at once outside one): a browser that receives a line
            # must be able to find it in the backlog after a reconnect.
            transaction.on_commit(lambda: publish_lines(run_id, rows))
            if self.indexer is not None:
                last_seq = first_seq + len(batch) - 1
                piece = Piece(run_id, task_id, first_seq, last_seq, ids[0], ids[-1], joined)
                transaction.on_commit(lambda: self.indexer.add(piece))
            return len(batch)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self.flush()
                self._closed = True
                if self.indexer is not None and self._next_seq is not None:  # it stored lines: index the rest now
                    self.indexer.finish(self.task.pk)


# --- Reading ------------------------------------------------------------------------------------


def _lines(run: PipelineRun | int, node: str | None = None) -> QuerySet[LogLine]:
    qs = LogLine.objects.filter(run_id=_run_id(run))
    if node:
        qs = qs.filter(node=node)
    return qs.order_by("pk")


def _dicts(qs: QuerySet[LogLine]) -> list[dict[str, Any]]:
    return [line_dict(**row) for row in qs.values(*_COLUMNS)]


def _backlog_qs(
    run: PipelineRun | int, after_id: int, task_ids: Iterable[int] | None, replica: str | None
) -> QuerySet[LogLine]:
    qs = _lines(run).filter(pk__gt=after_id)
    if task_ids is not None:
        qs = qs.filter(task_id__in=list(task_ids))
    if replica:
        qs = qs.filter(replica=replica)
    return qs


def backlog(
    run: PipelineRun | int,
    after_id: int = 0,
    task_ids: Iterable[int] | None = None,
    replica: str | None = None,
    limit: int = 5000,
) -> list[dict[str, Any]]:
    """Stored lines of the run after `after_id`, in storage order; `task_ids=None` means every task."""
    return _dicts(_backlog_qs(run, after_id, task_ids, replica)[:limit])


def backlog_rows(
    run: PipelineRun | int,
    after_id: int = 0,
    task_ids: Iterable[int] | None = None,
    replica: str | None = None,
    limit: int = 5000,
) -> list[list[Any]]:
    """`backlog` as rows in ROW_FIELDS order (what the websocket sends)."""
    rows = _backlog_qs(run, after_id, task_ids, replica)[:limit].values_list(*_COLUMNS)
    return [[*row[:6], row[6].isoformat(), row[7], row[8]] for row in rows]


def task_rows(
    task_id: int,
    after_seq: int,
    before_seq: int | None = None,
    *,
    after_id: int = 0,
    replica: str | None = None,
    limit: int = 5000,
) -> list[list[Any]]:
    """Stored lines of one attempt with `after_seq` < seq < `before_seq` (and id > `after_id`), as rows in seq order:
    what a socket missed of it (through the `(task, seq)` index)."""
    qs = LogLine.objects.filter(task_id=task_id, seq__gt=after_seq)
    if before_seq is not None:
        qs = qs.filter(seq__lt=before_seq)
    if after_id:
        qs = qs.filter(pk__gt=after_id)
    if replica:
        qs = qs.filter(replica=replica)
    rows = qs.order_by("seq")[:limit].values_list(*_COLUMNS)
    return [[*row[:6], row[6].isoformat(), row[7], row[8]] for row in rows]


def last_seqs(run_id: int, task_ids: Iterable[int] | None = None) -> tuple[dict[int, int], bool]:
    """({attempt id: its highest stored seq}, whether the run is finished): one index lookup per attempt."""
    newest = LogLine.objects.filter(task_id=OuterRef("pk")).order_by("-seq").values("seq")[:1]
    tasks = TaskRun.objects.filter(run_id=run_id)
    if task_ids is not None:
        tasks = tasks.filter(pk__in=list(task_ids))
    seqs = {pk: last for pk, last in tasks.annotate(last=Subquery(newest)).values_list("pk", "last") if last}
    status = PipelineRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return seqs, status is None or status in RUN_FINISHED


TRIGRAM = 3  # the shortest keyword a trigram index can narrow down


def search(
    run: PipelineRun | int,
    q: str,
    node: str | None = None,
    limit: int = 500,
    *,
    after_id: int = 0,
    replica: str | None = None,
    task_id: int | None = None,
) -> list[dict[str, Any]]:
    """Stored lines of the run that contain `q`, ignoring case, in storage order.

    The same filter with or without an index, so the results never depend on one; an index only narrows the
    rows it looks at (a scan of 1M lines takes 0.4–1 s). PostgreSQL: ILIKE over the run's first lines, then over
    the next ones while the keyword is frequent or too short for the index, else over the lines of the chunks whose
    trigram index entry may hold it (`_searched`, `_matching`). SQLite: `icontains`, the same way, the chunks found by
    their FTS5 table (`_fts_searched`); its case folding covers all of Unicode, LIKE's only ASCII, so the candidates
    include every match. Without FTS5: the scan.
    """
    lines = _narrowed(_lines(run, node), after_id, replica, task_id)
    if connections[lines.db].vendor == "postgresql":
        return _searched(run, node, lines, q, limit)
    if fts_in_sync(lines.db):
        return _fts_searched(run, node, lines, q, limit, (after_id, replica, task_id))
    return _dicts(lines.filter(text__icontains=q)[:limit])


def _narrowed(lines: QuerySet[LogLine], after_id: int, replica: str | None, task_id: int | None) -> QuerySet[LogLine]:
    if after_id:
        lines = lines.filter(pk__gt=after_id)
    if replica:
        lines = lines.filter(replica=replica)
    if task_id is not None:
        lines = lines.filter(task_id=task_id)
    return lines


def history(
    run: PipelineRun | int,
    *,
    after_id: int = 0,
    node: str | None = None,
    replica: str | None = None,
    task_id: int | None = None,
    q: str | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """One page of the run's stored lines after line `after_id`, in storage order (the API's paged history: the
    next page starts after the last id of this one), of one node, replica or attempt, containing `q` when given."""
    if q:
        return search(run, q, node, limit, after_id=after_id, replica=replica, task_id=task_id)
    return _dicts(_narrowed(_lines(run, node), after_id, replica, task_id)[:limit])


# PostgreSQL search first reads up to PROBE_LINES of the run's lines in id order (`_searched`), stopping at a full page:
# a keyword in 60 % of the lines of bench/logs.py fills it from ~830 lines (1 ms), where the trigram index rechecks
# every chunk that holds it (all 1,000 of a 1M-line run: 90 ms) before reading a line. A keyword found there once or
# more per 4 * CHUNK_LINES lines is in a good part of the chunks, so the index would skip few of them, and its lines
# are read on in id order until the page is full. A rarer keyword is looked up in the index for the lines after the
# probe; one shorter than a trigram has no index and is scanned. The scan goes through the run's (run_id, id) index
# (`_after`): never past another run's lines.
PROBE_LINES = 4000
# The probe is one statement (`_probed`): the window's matches (see ILike for `lower() LIKE lower()`) and, only when
# they are fewer than a page, the id of its PROBE_LINES-th line, where the probe stopped (none: the window held every
# line of the run). That id is read from the run's (run_id, id) index alone, and only when the one-time filter lets
# it: a full page costs what the matches cost (a `row_number()` over the window instead cost 70 % more for it).
_PROBE_SQL = (
    "WITH m AS MATERIALIZED (SELECT * FROM ({window}) AS w WHERE lower(text) LIKE lower(%s) ORDER BY id LIMIT %s)"
    " SELECT *, true FROM m UNION ALL"
    " SELECT e.id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false FROM ({end}) AS e"
    " WHERE (SELECT count(*) FROM m) < %s"
)


def _searched(
    run: PipelineRun | int, node: str | None, lines: QuerySet[LogLine], q: str, limit: int
) -> list[dict[str, Any]]:
    """PostgreSQL: lines of `lines` that contain `q` (ILIKE), in id order, up to `limit`: the scan when the keyword
    is frequent or short, the index when it is rare (see PROBE_LINES)."""
    run_id = _run_id(run)
    pattern = f"%{connections[lines.db].ops.prep_for_like_query(q)}%"
    found: list[dict[str, Any]] = []
    after = count = 0
    if PROBE_LINES:
        found, stopped = _probed(_after(lines, run_id, 0).order_by("pk"), pattern, limit)
        if len(found) >= limit or stopped is None:  # a full page, or every line of the run read
            return found
        after, count = stopped, PROBE_LINES
    rest = limit - len(found)
    if _rare(q, found, count):
        return found + _matching(run, node, lines.filter(pk__gt=after), [q], rest)
    return found + _dicts(_after(lines, run_id, after).filter(text__ilike=pattern)[:rest])


def _rare(q: str, found: list[dict[str, Any]], count: int) -> bool:
    """Whether to look `q` up in the index after a probe that found `found` in `count` lines (see PROBE_LINES): it is
    long enough for a trigram index, and found at most once per 4 * CHUNK_LINES lines of the probe."""
    return len(q) >= TRIGRAM and len(found) * CHUNK_LINES * 4 <= count


def _probed(window: QuerySet[LogLine], pattern: str, limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """The lines among the first PROBE_LINES of `window` that match `pattern`, up to `limit`, and the id of its
    PROBE_LINES-th line when fewer than `limit` match (None when it has fewer lines): one statement (_PROBE_SQL)."""
    lines_sql, lines_params = window.values_list(*_COLUMNS)[:PROBE_LINES].query.sql_with_params()
    end_sql, end_params = window.values_list("id")[PROBE_LINES - 1 : PROBE_LINES].query.sql_with_params()
    with connections[window.db].cursor() as cursor:
        cursor.execute(
            _PROBE_SQL.format(window=lines_sql, end=end_sql), [*lines_params, pattern, limit, *end_params, limit]
        )
        rows = cursor.fetchall()
    hits = sorted((row[:-1] for row in rows if row[-1]), key=lambda row: row[0])  # a UNION ALL has no order of its own
    ends = [row[0] for row in rows if not row[-1]]
    return [line_dict(**dict(zip(_COLUMNS, row, strict=True))) for row in hits], ends[0] if ends else None


def _after(lines: QuerySet[LogLine], run_id: int, after: int) -> QuerySet[LogLine]:
    """`lines` after id `after`, read in id order through the run's (run_id, id) index: the row comparison is what
    only that index serves (`run_id = x ORDER BY id` alone is read through the primary key, past other runs' lines)."""
    return lines.extra(where=[f"({_TABLE}.run_id, {_TABLE}.id) > (%s, %s)"], params=[run_id, after or 0])


# SQLite reads the lines of the candidate spans through the (task, seq) index when they are less than 1/SPANS_SHARE of
# the run's lines, else scans (bench/logs.py: a span's line cost about 3 times a scanned one).
SPANS_SHARE = 3


def _fts_searched(
    run: PipelineRun | int,
    node: str | None,
    lines: QuerySet[LogLine],
    q: str,
    limit: int,
    narrow: tuple[int, str | None, int | None],
) -> list[dict[str, Any]]:
    """SQLite: `_searched` with `icontains` and the chunks' FTS5 table. The probe reads the first PROBE_LINES of
    `lines`; a frequent or short keyword is scanned on from there, a rare one read from the lines of the chunks that
    may hold it and the tails, unless those are 1/SPANS_SHARE of the run's lines or more. `lines` is the run's lines
    narrowed by `narrow` (after_id, replica, task_id)."""
    found: list[dict[str, Any]] = []
    after = count = 0
    if PROBE_LINES:
        end = next(iter(lines.values_list("pk", flat=True)[PROBE_LINES - 1 : PROBE_LINES]), None)
        window = lines if end is None else lines.filter(pk__lte=end)
        found = _dicts(window.filter(text__icontains=q)[:limit])
        if len(found) >= limit or end is None:  # a full page, or every line read
            return found
        after, count = end, PROBE_LINES
    rest = limit - len(found)
    if _rare(q, found, count):
        groups = candidates(_run_id(run), node, [q], lines.db)
        spanned = sum(span.last_seq - span.first_seq + 1 for group in groups for span in group)
        if spanned * SPANS_SHARE < sum(last_seqs(_run_id(run))[0].values()):
            # The spans' lines without the run's condition, which SQLite would rather read through the run's (run,
            # id) index, testing every span on every line of the run (40 times slower for a keyword in most chunks);
            # `+id`: nor through the primary key from `after` on.
            after_id, replica, task_id = narrow
            spans = _narrowed(LogLine.objects.order_by("pk"), 0, replica, task_id)
            spans = spans.extra(where=[f"+{_TABLE}.id > %s"], params=[max(after, after_id)])
            return found + _matching(run, node, spans, [q], rest, groups)
    return found + _dicts(lines.filter(pk__gt=after, text__icontains=q)[:rest])


# Spans whose lines the first query reads, doubled for each next one: a frequent keyword fills `limit` from the first
# few, a rare one has few. At most MAX_SPANS a query: past ~64 the bitmap of their lines outgrows work_mem, turns
# lossy, and every line of its pages is rechecked against every span's condition (10M lines of bench/logs.py, a
# keyword in most chunks: 128 spans took 6.5 s, 256 took 14.6 s; 32 take ~50 ms).
FIRST_SPANS = 4
MAX_SPANS = 32


def _matching(
    run: PipelineRun | int,
    node: str | None,
    lines: QuerySet[LogLine],
    keywords: list[str],
    limit: int,
    groups: list[list[Span]] | None = None,
) -> list[dict[str, Any]]:
    """Lines of `lines` that contain any of `keywords` (3+ characters each; PostgreSQL: ILIKE, SQLite: `icontains`),
    in id order, up to `limit`. Only the lines that may hold one are read (`groups`, from logindex.candidates), a few
    spans at a time until `limit` are found."""
    db = connections[lines.db]
    contains = Q()
    for q in keywords:
        if db.vendor == "postgresql":
            contains |= Q(text__ilike=f"%{db.ops.prep_for_like_query(q)}%")
        else:
            contains |= Q(text__icontains=q)
    if groups is None:
        groups = candidates(_run_id(run), node, keywords, lines.db)
    found: list[dict[str, Any]] = []
    budget, taken, spans = FIRST_SPANS, 0, Q()
    for index, group in enumerate(groups):
        spans |= within(group)
        taken += len(group)
        if taken < budget and index < len(groups) - 1:
            continue
        found += _dicts(lines.filter(spans).filter(contains)[: limit - len(found)])
        if len(found) >= limit:
            break
        budget, taken, spans = min(budget * 2, MAX_SPANS), 0, Q()
    return found


def first_error(run: PipelineRun | int) -> dict[str, Any] | None:
    """The first stored line that mentions an error, exception, traceback or failure (any stream)."""
    lines = _lines(run)
    if connections[lines.db].vendor == "postgresql":
        found = _matching(run, None, lines, list(ERROR_WORDS), 1)
    elif fts_in_sync(lines.db):  # the spans alone, without the run's condition (see _fts_searched)
        found = _matching(run, None, LogLine.objects.order_by("pk"), list(ERROR_WORDS), 1)
    else:
        words = Q()
        for word in ERROR_WORDS:
            words |= Q(text__icontains=word)
        found = _dicts(lines.filter(words)[:1])
    return found[0] if found else None


def format_line(ts: datetime, node: str, attempt: int, replica: str, text: str) -> str:
    return f"{ts.isoformat()} [{node}#{attempt}/{replica}] {text}\n"


_TEXT_COLUMNS = ("ts", "node", "attempt", "replica", "text")


def iter_text(run: PipelineRun | int, node: str | None = None) -> Iterator[str]:
    """The run's stored lines as text, one formatted line at a time, streamed from the database."""
    for row in _lines(run, node).values_list(*_TEXT_COLUMNS).iterator(chunk_size=TEXT_CHUNK_LINES):
        yield format_line(*row)


def join_chunks(lines: Iterable[str], size: int = TEXT_CHUNK_LINES) -> Iterator[str]:
    """Group lines into chunks: one write per line would make a download of a million lines crawl."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


async def aiter_text(run: PipelineRun | int, node: str | None = None) -> AsyncIterator[str]:
    """`iter_text` in chunks for ASGI, where Django would read a synchronous iterator into memory first.

    Pages by primary key up to the last line stored when it starts (`aiterator()` cannot run a
    `values_list()` query in Django 5.2: it executes it in the event loop)."""
    qs = _lines(run, node)
    last = await qs.aaggregate(last=Max("pk"))
    upto, after = last["last"] or 0, 0
    rows_of = sync_to_async(
        lambda after: list(qs.filter(pk__gt=after, pk__lte=upto).values_list("pk", *_TEXT_COLUMNS)[:TEXT_CHUNK_LINES])
    )
    while after < upto:
        rows = await rows_of(after)
        if not rows:
            return
        after = rows[-1][0]
        yield "".join(format_line(*row[1:]) for row in rows)
