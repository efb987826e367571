"""The compaction of the overview's roll-ups: the deltas the triggers append (migration jobs.0015) folded into the
summary rows (`RunSlot`, `TaskUsageSlot`).

Writers only append deltas; the summaries are written here and nowhere else, by one compactor at a time, in one
transaction that removes the deltas it folds and adds them to the summaries. A reader sums the summary and the
deltas of its window in one statement (one snapshot), so it sees each change exactly once whether the compaction
committed before it or not: the compaction's timing bounds the reader's cost (the deltas left to sum), never its
answer. Beat runs it every `PORTAL_ROLLUP_COMPACT_INTERVAL` seconds; the overview runs it too when it read more
than `COMPACT_AFTER` deltas (no beat, say).

PostgreSQL: `pg_try_advisory_xact_lock` keeps a second compactor out (it returns at once, folding nothing), and the
deltas are taken with `DELETE … RETURNING` inside the statement that adds them up: exactly the rows it deleted, none
that a writer had not committed yet (a bound on the id would not do: ids come from a sequence in the order of the
inserts, not of the commits, so a smaller id may commit after the compaction's read). Writers never wait on it: they
only insert delta rows, which the compaction's deletes do not touch, and never write the summaries.
SQLite: its writers are serialised (`transaction_mode` IMMEDIATE), so the compaction folds and deletes the deltas up
to the largest id it saw in one write transaction."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import IntegrityError, OperationalError, connection, transaction

logger = logging.getLogger(__name__)

# The advisory lock's key: a constant the portal uses for no other lock.
ADVISORY_KEY = 150_100_015
# The overview compacts when it read more deltas than this for one project's window (beat normally keeps it far
# below: a minute's changes).
COMPACT_AFTER = 5000
# How long the compaction waits for a lock before it gives up (PostgreSQL), well under `deadlock_timeout` (1 s).
LOCK_TIMEOUT = "200ms"


@dataclass(frozen=True)
class Rollup:
    summary: str
    delta: str
    key: str  # the column beside project and slot
    values: tuple[str, ...]  # added up; the first is the count, whose 0 means the row counts nothing

    @property
    def count(self) -> str:
        return self.values[0]


RUNS = Rollup("jobs_runslot", "jobs_runslotdelta", "status", ("runs",))
TASKS = Rollup(
    "jobs_taskusageslot", "jobs_taskusageslotdelta", "failure_cause", ("tasks", "cpu_seconds", "gpu_seconds")
)


def _nonzero(rollup: Rollup, prefix: str = "") -> str:
    return " OR ".join(f"{prefix}{v} <> 0" for v in rollup.values)


def _sums(rollup: Rollup) -> str:
    return ", ".join(f"sum({v}) AS {v}" for v in rollup.values)


def _fold_postgresql(cursor, rollup: Rollup) -> int:
    """One statement: the deltas deleted, summed by key and added to the summaries (those of projects that still
    exist; a deleted project's deltas just go). Returns how many deltas it folded. Summary rows that fell to a count
    of zero are deleted afterwards (nothing else writes them: this transaction holds the only compactor's lock)."""
    r, columns = rollup, ", ".join(rollup.values)
    cursor.execute(
        f"""
        WITH gone AS (DELETE FROM {r.delta} RETURNING project_id, slot, {r.key}, {columns}),
        sums AS (SELECT project_id, slot, {r.key}, {_sums(r)}, count(*) AS deltas FROM gone GROUP BY 1, 2, 3),
        folded AS (
            INSERT INTO {r.summary} (project_id, slot, {r.key}, {columns})
            SELECT s.project_id, s.slot, s.{r.key}, {", ".join(f"s.{v}" for v in r.values)}
            FROM sums s JOIN projects_project p ON p.id = s.project_id WHERE {_nonzero(r, "s.")}
            ON CONFLICT (project_id, slot, {r.key}) DO UPDATE SET
                {", ".join(f"{v} = {r.summary}.{v} + EXCLUDED.{v}" for v in r.values)}
            RETURNING id, {r.count}
        )
        SELECT (SELECT coalesce(sum(deltas), 0) FROM sums), ARRAY(SELECT id FROM folded WHERE {r.count} = 0)
        """
    )
    deltas, empty = cursor.fetchone()
    if empty:
        cursor.execute(f"DELETE FROM {r.summary} WHERE id = ANY(%s) AND {r.count} = 0", [empty])
    return int(deltas)


def _fold_sqlite(cursor, rollup: Rollup) -> int:
    r, columns = rollup, ", ".join(rollup.values)
    cursor.execute(f"SELECT max(id), count(*) FROM {r.delta}")
    top, deltas = cursor.fetchone()
    if top is None:
        return 0
    same_key = (
        f"d.project_id = {r.summary}.project_id AND d.slot = {r.summary}.slot AND d.{r.key} = {r.summary}.{r.key}"
    )
    cursor.execute(
        f"""
        INSERT INTO {r.summary} (project_id, slot, {r.key}, {columns})
        SELECT d.project_id, d.slot, d.{r.key}, {_sums(r)}
        FROM {r.delta} d JOIN projects_project p ON p.id = d.project_id WHERE d.id <= %s
        GROUP BY 1, 2, 3 HAVING {" OR ".join(f"sum({v}) <> 0" for v in r.values)}
        ON CONFLICT (project_id, slot, {r.key}) DO UPDATE SET {", ".join(f"{v} = {v} + excluded.{v}" for v in r.values)}
        """,
        [top],
    )
    cursor.execute(
        f"DELETE FROM {r.summary} WHERE {r.count} = 0 AND EXISTS "
        f"(SELECT 1 FROM {r.delta} d WHERE d.id <= %s AND {same_key})",
        [top],
    )
    cursor.execute(f"DELETE FROM {r.delta} WHERE id <= %s", [top])
    return int(deltas)


def compact() -> tuple[int, int] | None:
    """Fold the deltas into the summaries: (run deltas, task deltas) folded, or None when it did not (another
    compaction under way, or it would have had to wait; PostgreSQL). Safe to run at any time, any number of times.

    The compaction never makes anyone else wait long or fail: under `lock_timeout` (`LOCK_TIMEOUT`) it gives up
    rather than wait, and the next pass folds what it left. It can only meet a project's deletion (which holds the
    project's row, then deletes its summary rows, while a new summary row's foreign key check wants to share that
    row): a cycle the deadlock detector would break by aborting either side, the deletion included."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor != "postgresql":
                return _fold_sqlite(cursor, RUNS), _fold_sqlite(cursor, TASKS)
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ADVISORY_KEY])
            if not cursor.fetchone()[0]:
                return None
            cursor.execute("SET LOCAL lock_timeout = %s", [LOCK_TIMEOUT])
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the summaries' foreign keys checked under it too
            return _fold_postgresql(cursor, RUNS), _fold_postgresql(cursor, TASKS)
    except (OperationalError, IntegrityError) as exc:
        # 55P03: a lock it would have waited for; 23503: the project of a delta was deleted meanwhile (its deltas
        # go with the next pass, which no longer finds the project)
        cause = exc.__cause__
        if getattr(cause, "sqlstate", None) not in ("55P03", "23503"):  # psycopg 3's code (as dbtimeout reads it)
            raise
        logger.info("roll-up compaction left for the next pass: %s", exc)
        return None
