"""The text index of log lines: their text gathered into chunks (LogChunk), written after the lines are live.

Indexing every line in the transaction that stores it cost more than storing it: sorting the trigrams of each batch
and feeding PostgreSQL's GIN index (SQLite: its FTS5 table, jobs.0002) was on the critical path of every live line
(bench/logs.py). So the lines are stored and published first, and the agent's indexer (one thread per process,
`shared_indexer`) gathers each attempt's stored batches into chunks of about CHUNK_LINES lines and writes one LogChunk
per chunk: the text of its lines, lower-cased, under a trigram index (PostgreSQL: pg_trgm, also holding the run,
jobs.0006; SQLite: an FTS5 trigram table kept by triggers on the chunks, jobs.0017). It does so once the attempt
pauses or ends (QUIET_SECONDS), so that a task printing at full speed has the database to itself.

A task's chunks are written in order and without holes (after a failure, none more for that task), so the lines
not in a chunk are always the last ones of their attempt: its *tail*, `seq` above the highest chunked one. Search
(`candidates`) reads the lines of the chunks whose text may hold a keyword plus every tail, so a line is found
before it is indexed, and when its chunk never came (the agent died, the database refused it).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from django.db import DatabaseError, connection, connections
from django.db.models import Q

from apps.jobs.models import LogChunk, LogLine, TaskRun
from apps.runtime.models import progress_marker

logger = logging.getLogger(__name__)

# Lines per chunk (as jobs.0006 gathers them). Indexing costs about the same per line at 1,000 and at 10,000 (4.7 and
# 4.3 ms per 1,000 of bench/logs.py's lines), and a search reads a whole chunk's lines where it may hold the keyword:
# 4,000 made a frequent keyword's first 500 matches cost 60 ms instead of 15 over 1M lines.
CHUNK_LINES = 1000
# Live lines first: a task's lines are indexed once it has stored nothing for QUIET_SECONDS (or ended), so indexing
# does not take the database from a task printing at full speed; but never later than MAX_WAIT_SECONDS, nor while
# more than MAX_PENDING_CHARS of text wait (then the task holding most is indexed).
QUIET_SECONDS = 0.5
MAX_WAIT_SECONDS = 10.0
MAX_PENDING_CHARS = 16 << 20
QUEUED_BATCHES = 256  # stored batches waiting for the indexer; then the storing thread waits (never a hole)
WRITE_ATTEMPTS = 3


@dataclass
class Piece:
    """One stored batch of an attempt's lines, as the indexer receives it."""

    run_id: int
    task_id: int
    first_seq: int
    last_seq: int
    first_id: int
    last_id: int
    text: str  # the lines joined by newlines

    @property
    def lines(self) -> int:
        return self.last_seq - self.first_seq + 1


@dataclass
class Pending:
    """An attempt's stored batches not in a chunk yet."""

    since: float  # when the first arrived
    last: float  # when the last arrived
    pieces: list[Piece] = field(default_factory=list)
    chars: int = 0

    def chunks(self, lines: int) -> list[LogChunk]:
        """The pieces as chunks of consecutive pieces, each of at least `lines` lines but the last."""
        chunks, group, count = [], [], 0
        for piece in self.pieces:
            group.append(piece)
            count += piece.lines
            if count >= lines:
                chunks.append(_chunk(group))
                group, count = [], 0
        if group:
            chunks.append(_chunk(group))
        return chunks


def _chunk(pieces: list[Piece]) -> LogChunk:
    first, last = pieces[0], pieces[-1]
    return LogChunk(
        run_id=first.run_id,
        task_id=first.task_id,
        first_seq=first.first_seq,
        last_seq=last.last_seq,
        first_id=min(piece.first_id for piece in pieces),
        last_id=max(piece.last_id for piece in pieces),
        text="\n".join(piece.text for piece in pieces),
    )


def write_chunk(chunk: LogChunk) -> None:
    """Insert a chunk with its text lower-cased by the database: lower() is the very function PostgreSQL's ILIKE
    applies, so `LIKE lower(pattern)` finds every chunk whose lines `ILIKE pattern` would match."""
    table = LogChunk._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (run_id, task_id, first_seq, last_seq, first_id, last_id, text)"
            " VALUES (%s, %s, %s, %s, %s, %s, lower(%s))",
            [chunk.run_id, chunk.task_id, chunk.first_seq, chunk.last_seq, chunk.first_id, chunk.last_id, chunk.text],
        )


class ChunkIndexer:
    """Gathers stored batches per attempt and writes them as chunks when they are due. `take` is the bookkeeping;
    the thread started by the first `add` writes what it returns, on a connection of its own."""

    RETRY_SECONDS = 1.0

    def __init__(
        self,
        chunk_lines: int = CHUNK_LINES,
        quiet: float = QUIET_SECONDS,
        max_wait: float = MAX_WAIT_SECONDS,
        max_chars: int = MAX_PENDING_CHARS,
    ) -> None:
        self.chunk_lines, self.quiet, self.max_wait, self.max_chars = chunk_lines, quiet, max_wait, max_chars
        self.pending: dict[int, Pending] = {}
        self.chars = 0  # of all pending text
        self.given_up: set[int] = set()  # tasks whose chunks stopped at a failure: the rest of their lines is tail
        self.queue: queue.Queue[Piece | int | None] = queue.Queue(QUEUED_BATCHES)
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    # --- what the log writer calls (after the lines' commit) ---

    def add(self, piece: Piece) -> None:
        self._start()
        self.queue.put(piece)

    def finish(self, task_id: int) -> None:
        """The attempt stored its last line: index what waits of it now."""
        self._start()
        self.queue.put(task_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending and end the thread (what is not written by then stays tail)."""
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(timeout)

    # --- bookkeeping ---

    def take(self, item: Piece | int | None, now: float) -> list[LogChunk]:
        """Account for a piece, a finished task (its id) or nothing (a tick); return the chunks due."""
        due: list[int] = []
        if isinstance(item, Piece) and item.task_id not in self.given_up:
            pending = self.pending.setdefault(item.task_id, Pending(since=now, last=now))
            pending.pieces.append(item)
            pending.last = now
            pending.chars += len(item.text)
            self.chars += len(item.text)
        elif isinstance(item, int):
            self.given_up.discard(item)  # nothing more will come for it
            if item in self.pending:
                due.append(item)
        for task_id, pending in self.pending.items():
            if task_id not in due and (now - pending.last >= self.quiet or now - pending.since >= self.max_wait):
                due.append(task_id)
        chunks = [chunk for task_id in due for chunk in self._pop(task_id)]
        while self.chars > self.max_chars:
            chunks += self._pop(max(self.pending, key=lambda task_id: self.pending[task_id].chars))
        return chunks

    def drain(self) -> list[LogChunk]:
        return [chunk for task_id in list(self.pending) for chunk in self._pop(task_id)]

    def _pop(self, task_id: int) -> list[LogChunk]:
        pending = self.pending.pop(task_id)
        self.chars -= pending.chars
        return pending.chunks(self.chunk_lines)

    # --- the thread ---

    def _start(self) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="log-indexer", daemon=True)
                    self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    item = self.queue.get(timeout=self.quiet / 2)
                except queue.Empty:
                    item = False  # a tick: writes what waited long enough
                if item is None:
                    self._write(self.drain())
                    return
                self._write(self.take(None if item is False else item, time.monotonic()))
        finally:
            connection.close()  # this thread's own

    def _write(self, chunks: list[LogChunk]) -> None:
        """Each task's chunks in one transaction that does not wait for the WAL flush: a chunk lost to a crash of
        the database leaves its lines tail, and a later one cannot outlive it (the WAL is written in order). SQLite:
        one transaction per chunk, as its writers take turns: a task's live lines wait for one chunk at most, not for
        all that were due (its WAL is written in order too)."""
        for task_id, group in itertools.groupby(chunks, key=lambda chunk: chunk.task_id):
            group = list(group)
            steps = [[chunk] for chunk in group] if connection.vendor == "sqlite" else [group]
            for step in steps:
                if task_id in self.given_up:
                    break
                self._write_step(task_id, step)

    def _write_step(self, task_id: int, chunks: list[LogChunk]) -> None:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                with progress_marker():
                    for chunk in chunks:
                        write_chunk(chunk)
                return
            except DatabaseError:
                logger.warning("could not index log lines of task %s; will retry", task_id, exc_info=True)
                connection.close()
                time.sleep(self.RETRY_SECONDS * (attempt + 1))
        # No hole: no later chunk of this task either. Its lines from here on are found as its tail.
        logger.error("gave up indexing the log lines of task %s from line %s", task_id, chunks[0].first_seq)
        self.given_up.add(task_id)


_shared: ChunkIndexer | None = None
_shared_lock = threading.Lock()


def shared_indexer() -> ChunkIndexer | None:
    """This process's indexer; None where the database has no text index of chunks (SQLite without FTS5: search
    scans)."""
    global _shared
    if connection.vendor != "postgresql" and not fts_in_sync(connection.alias):
        return None
    with _shared_lock:
        if _shared is None:
            _shared = ChunkIndexer()
            atexit.register(_shared.stop)
    return _shared


# SQLite's FTS5 table over the chunks' text (jobs.0017; not in the model state: vendor-specific, read only here).
FTS_TABLE = "jobs_logchunk_fts"
FTS_TRIGGERS = ("jobs_logchunk_fts_insert", "jobs_logchunk_fts_delete", "jobs_logchunk_fts_update")


def fts_in_sync(using: str) -> bool:
    """Whether SQLite's FTS5 table of chunks exists with all its triggers (a table rebuild by a later migration
    drops triggers, and a stale index would hide lines)."""
    db = connections[using]
    if db.vendor != "sqlite":
        return False
    names = (FTS_TABLE, *FTS_TRIGGERS)
    with db.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM sqlite_master WHERE name IN ({', '.join(['%s'] * len(names))})", names)
        return cursor.fetchone()[0] == len(names)


# --- Reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """Lines to read: an attempt's lines `first_seq`..`last_seq`, whose ids lie in `first_id`..`last_id`."""

    first_id: int
    last_id: int
    task_id: int
    first_seq: int
    last_seq: int


def candidates(run_id: int, node: str | None, keywords: list[str], using: str) -> list[list[Span]]:
    """The lines of the run's tasks (of `node`, if given) that may contain any of `keywords` (3+ characters each),
    ignoring case: the chunks whose text may, and every tail. Returned as groups of spans sorted by id, whose id
    ranges do not overlap: read group by group, the lines come in id order, each once. One round trip: they, not the
    work, were most of a rare keyword's time (the task ids, the chunks and the tails were read apart)."""
    db = connections[using]
    params = [run_id, *([node] if node else [])]
    if db.vendor == "sqlite":
        # Each keyword as one FTS5 string (its trigrams, in a row); FTS5 folds the case of all of Unicode, LIKE only
        # of ASCII, so the chunks found include every one whose lines `icontains` would match.
        phrases = " OR ".join('"' + keyword.replace('"', '""') + '"' for keyword in keywords)
        sql = _SQLITE_CANDIDATES_SQL.format(node=" AND node = %s" if node else "")
        with db.cursor() as cursor:
            cursor.execute(sql, [*params, phrases, run_id])
            rows = cursor.fetchall()
    else:
        patterns = [f"%{db.ops.prep_for_like_query(keyword)}%" for keyword in keywords]
        likes = " OR ".join(["text LIKE lower(%s)"] * len(patterns))
        # Through the trigram index, never by reading every chunk: the planner takes LIKE over a chunk for as cheap
        # as over a line, and would rather scan a small table than use an index, 300 times slower for a rare keyword
        # in a run of 1M lines.
        sql = _CANDIDATES_SQL.format(likes=likes, node=" AND node = %s" if node else "")
        with db.cursor() as cursor:
            rows = planned(cursor, sql, [*params, run_id, *patterns], enable_seqscan="off", jit="off")
    tasks = {row[3] for row in rows if row[0] == "t"}
    spans = [Span(*row[1:]) for row in rows if row[3] in tasks and row[1] is not None]
    spans.sort(key=lambda span: span.first_id)
    groups: list[list[Span]] = []
    last_id = 0
    for span in spans:
        if groups and span.first_id <= last_id:
            groups[-1].append(span)
            last_id = max(last_id, span.last_id)
        else:
            groups.append([span])
            last_id = span.last_id
    return groups


# The chunks that may match ('c'; `run_id + 0`: the expression the trigram index holds, jobs.0006, which no other index
# serves), and each task of the run ('t') with its tail: its lines after its last chunk, from the first and the last
# of them by the (task, seq) index (an attempt's ids grow with its seq), NULL when every line is in a chunk.
_CANDIDATES_SQL = f"""
WITH tasks AS (SELECT id FROM {TaskRun._meta.db_table} WHERE run_id = %s{{node}})
SELECT 'c', first_id, last_id, task_id, first_seq, last_seq FROM {LogChunk._meta.db_table}
 WHERE run_id + 0 = %s::bigint AND ({{likes}})
UNION ALL
SELECT 't', head.id, tail.id, t.id, head.seq, tail.seq FROM tasks AS t
 CROSS JOIN LATERAL (SELECT COALESCE(max(last_seq), 0) AS seq FROM {LogChunk._meta.db_table} WHERE task_id = t.id) AS k
 LEFT JOIN LATERAL (SELECT id, seq FROM {LogLine._meta.db_table} WHERE task_id = t.id AND seq > k.seq
  ORDER BY seq LIMIT 1) AS head ON true
 LEFT JOIN LATERAL (SELECT id, seq FROM {LogLine._meta.db_table} WHERE task_id = t.id AND seq > k.seq
  ORDER BY seq DESC LIMIT 1) AS tail ON true
"""

# The same on SQLite: the chunks from the FTS5 table, and the tails by correlated subqueries (no LATERAL), each one
# lookup in the (task, last_seq) or the (task, seq) index.
_LINE = f"SELECT {{column}} FROM {LogLine._meta.db_table} WHERE task_id = k.id AND seq > k.seq ORDER BY seq {{order}}"
_SQLITE_CANDIDATES_SQL = f"""
WITH k AS (SELECT t.id, COALESCE((SELECT max(last_seq) FROM {LogChunk._meta.db_table} WHERE task_id = t.id), 0) AS seq
 FROM {TaskRun._meta.db_table} AS t WHERE t.run_id = %s{{node}})
SELECT 'c', c.first_id, c.last_id, c.task_id, c.first_seq, c.last_seq
 FROM {FTS_TABLE} JOIN {LogChunk._meta.db_table} AS c ON c.id = {FTS_TABLE}.rowid
 WHERE {FTS_TABLE} MATCH %s AND c.run_id = %s
UNION ALL
SELECT 't', ({_LINE.format(column="id", order="ASC LIMIT 1")}), ({_LINE.format(column="id", order="DESC LIMIT 1")}),
 k.id, ({_LINE.format(column="seq", order="ASC LIMIT 1")}), ({_LINE.format(column="seq", order="DESC LIMIT 1")}) FROM k
"""


def within(group: list[Span]) -> Q:
    """The lines of a group of spans (read through the (task, seq) index)."""
    lines = Q()
    for span in group:
        lines |= Q(task_id=span.task_id, seq__range=(span.first_seq, span.last_seq))
    return lines


def planned(cursor, sql: str, params: list | None, **settings: str) -> list[tuple]:
    """The rows of one PostgreSQL query run with these planner settings, which are back to what they were after it,
    in one round trip: `SET LOCAL` and the query in one simple-query message (its own transaction, outside one), or
    between a savepoint and the rollback to it (inside the caller's transaction, where SET LOCAL would last to its
    end). Under load each round trip cost a rare keyword's search more than the query: reading, setting and
    restoring the settings apart were three more. `jit` off: where a plan is disabled rather than impossible its cost
    is 10^10, which would compile the query first."""
    sets = "".join(f"SET LOCAL {name} = {value}; " for name, value in settings.items() if name.isidentifier())
    if cursor.db.in_atomic_block:
        name = f"planned_{threading.get_ident()}"
        cursor.execute(f"SAVEPOINT {name}; {sets}{sql}; ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}", params)
    else:
        cursor.execute(f"{sets}{sql}", params)
    results = cursor.cursor  # psycopg's: one result per statement, the query's is the one with columns
    while results.description is None and results.nextset():
        pass
    return results.fetchall()
