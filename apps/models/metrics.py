"""The metric hot path: bulk inserts that skip points already stored, the latest-value upsert, keyset history
reads.

No model instances here: rows go straight to the database. Call `insert_points` inside a transaction.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from django.db import connection, transaction
from psycopg.errors import UniqueViolation

from apps.models.errors import InvalidParameter
from apps.models.models import LatestMetric, Metric, Run
from apps.models.querysets import ACTIVE

HISTORY_PAGE_MAX = 100_000
SMALL_BATCH = 20  # PostgreSQL: up to this many points, one INSERT rather than COPY in a savepoint
COLUMNS = "run_id, key, value, timestamp, step, is_nan"
SKIP_STORED = "ON CONFLICT (run_id, key, step, timestamp, value, is_nan) DO NOTHING"  # MLflow's primary key
_LATEST = LatestMetric._meta.db_table
_ARRAYS = "unnest(%s::text[], %s::float8[], %s::int8[], %s::int8[], %s::bool[])"  # the points, by `_columns`
UPSERT_LATEST = (  # a key's latest value moves only forward
    f"ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, timestamp = excluded.timestamp, "
    f"step = excluded.step, is_nan = excluded.is_nan "
    f"WHERE (excluded.step, excluded.timestamp, excluded.value) > "
    f"({_LATEST}.step, {_LATEST}.timestamp, {_LATEST}.value)"
)


class Point(NamedTuple):
    key: str
    value: float  # 0.0 when is_nan (MLflow's storage convention)
    timestamp: int
    step: int
    is_nan: bool


def make_point(key: str, value: float, timestamp: int, step: int) -> Point:
    if math.isnan(value):
        return Point(key, 0.0, timestamp, step, True)
    return Point(key, value, timestamp, step, False)


def _rank(point: Point) -> tuple[int, int, float]:
    return (point.step, point.timestamp, point.value)


def insert_points(run_id: int, points: list[Point]) -> None:
    """Add `points` to run `run_id` and move each key's latest value forward where they are newer.

    A point already stored (same key, step, timestamp and value: MLflow's primary key) is skipped, also within
    `points`, so a retried request changes nothing.
    """
    if not points:
        return
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _insert_postgresql(cursor, run_id, points)
        else:
            cursor.executemany(
                f"INSERT INTO {Metric._meta.db_table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) {SKIP_STORED}",
                [(run_id, p.key, p.value, p.timestamp, p.step, p.is_nan) for p in points],
            )
        _upsert_latest(cursor, run_id, points)


def insert_points_by_run_uuid(run_uuid: str, project_ids: Iterable[int], points: list[Point]) -> bool:
    """PostgreSQL, a few points (`log_metric`, `log_metrics`): find the run and store the points in ONE statement.

    The run is found by its id among the active runs of `project_ids` (the projects the caller may write to), and
    both inserts hang off that lookup in data-modifying CTEs, so the call is a single round trip: outside a
    transaction it commits by itself, all or nothing, with no BEGIN/COMMIT of its own (`insert_points`' path is the
    run's SELECT, BEGIN, two INSERTs and COMMIT: five). False when no such run matched, and then nothing was
    written: the caller takes the ordinary path, which says why (no such run, another project, not writable,
    deleted). Same semantics as `insert_points`: points already stored are skipped, a latest value only moves
    forward (docs/tracking.md, "Round three").
    """
    if connection.vendor != "postgresql" or not points or len(points) > SMALL_BATCH:
        return False
    project_ids = list(project_ids)
    if not project_ids:
        return False
    latest = _latest_per_key(points)
    metric, run = Metric._meta.db_table, Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH r AS (SELECT id FROM {run} WHERE run_uuid = %s AND lifecycle_stage = %s "
            f"AND project_id = ANY(%s::int8[])), "
            f"m AS (INSERT INTO {metric} ({COLUMNS}) SELECT r.id, p.* FROM r CROSS JOIN {_ARRAYS} AS p {SKIP_STORED}), "
            f"l AS (INSERT INTO {_LATEST} ({COLUMNS}) SELECT r.id, p.* FROM r CROSS JOIN {_ARRAYS} AS p "
            f"{UPSERT_LATEST}) "
            f"SELECT id FROM r",
            [run_uuid, ACTIVE, project_ids, *_columns(points), *_columns(latest)],
        )
        return cursor.fetchone() is not None


def _columns(points: list[Point]) -> list[list]:
    return [
        [p.key for p in points],
        [float(p.value) for p in points],  # a list of ints and floats cannot be sent as one array
        [int(p.timestamp) for p in points],
        [int(p.step) for p in points],
        [bool(p.is_nan) for p in points],
    ]


def _insert_postgresql(cursor, run_id: int, points: list[Point]) -> None:
    """COPY, the fastest path, for points never seen; COPY cannot skip conflicts, so when one of them is already
    stored (a retry: rare), its savepoint is rolled back and one INSERT over five arrays skips what is stored.
    (That INSERT alone measured ~1.4× the time of COPY for 1,000 points, so it is not the common path.) A few
    points (a `log_metric` call) go straight to that INSERT: one statement instead of a savepoint, a COPY and its
    release."""
    table = Metric._meta.db_table
    if len(points) <= SMALL_BATCH:
        _insert_skipping_stored(cursor, table, run_id, points)
        return
    try:
        with transaction.atomic(savepoint=True), cursor.cursor.copy(f"COPY {table} ({COLUMNS}) FROM STDIN") as copy:
            for p in points:
                copy.write_row((run_id, p.key, p.value, p.timestamp, p.step, p.is_nan))
    except UniqueViolation:
        _insert_skipping_stored(cursor, table, run_id, points)


def _insert_skipping_stored(cursor, table: str, run_id: int, points: list[Point]) -> None:
    cursor.execute(
        f"INSERT INTO {table} ({COLUMNS}) SELECT %s, * FROM {_ARRAYS} {SKIP_STORED}",
        [run_id, *_columns(points)],
    )


def _upsert_latest(cursor, run_id: int, points: list[Point]) -> None:
    """One multi-row upsert. Under concurrency each row's UPDATE re-checks the condition against the
    committed row (PostgreSQL locks it; SQLite serialises writers), so no newer value is overwritten.
    Keys are sorted so concurrent writers lock rows in the same order (no deadlock)."""
    rows = _latest_per_key(points)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(rows))
    params: list = []
    for p in rows:
        params += [run_id, p.key, p.value, p.timestamp, p.step, p.is_nan]
    cursor.execute(f"INSERT INTO {_LATEST} ({COLUMNS}) VALUES {values} {UPSERT_LATEST}", params)


def _latest_per_key(points: list[Point]) -> list[Point]:
    """Each key's newest point (by step, timestamp, value), in key order."""
    best: dict[str, Point] = {}
    for p in points:
        current = best.get(p.key)
        if current is None or _rank(p) > _rank(current):
            best[p.key] = p
    return [best[key] for key in sorted(best)]


def encode_token(payload: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()


def decode_token(token: str, *fields: str) -> dict:
    """The payload of a page token whose `fields` are integers the database can hold (64-bit)."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)))
        if not isinstance(payload, dict) or any(not _is_int64(payload.get(f)) for f in fields):
            raise ValueError
    except (ValueError, TypeError, UnicodeError, RecursionError):
        raise InvalidParameter(f"Invalid page token {token!r}.") from None
    return payload


def decode_offset(token: str | None) -> int:
    """The offset a search page token holds (0 without a token); a negative one is an invalid token."""
    if not token:
        return 0
    offset = decode_token(token, "offset")["offset"]
    if offset < 0:
        raise InvalidParameter(f"Invalid page token {token!r}.")
    return offset


def _is_int64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def history_page(run_id: int, key: str, max_results: int | None, page_token: str | None) -> tuple[list[tuple], str]:
    """Rows (value, timestamp, step, is_nan) in (step, timestamp, id) order, and the next page token.

    Keyset pagination: the token holds the last (step, timestamp, id), so page N costs the same as page 1.
    """
    limit = HISTORY_PAGE_MAX if not max_results else min(max_results, HISTORY_PAGE_MAX)
    if limit < 1:
        raise InvalidParameter(f"Invalid value {max_results} for parameter 'max_results' supplied.")
    table = Metric._meta.db_table
    sql = f"SELECT value, timestamp, step, is_nan, id FROM {table} WHERE run_id = %s AND key = %s"
    params: list = [run_id, key]
    if page_token:
        after = decode_token(page_token, "s", "t", "i")
        sql += " AND (step, timestamp, id) > (%s, %s, %s)"
        params += [after["s"], after["t"], after["i"]]
    sql += " ORDER BY step, timestamp, id LIMIT %s"
    params.append(limit + 1)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    token = ""
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        token = encode_token({"s": last[2], "t": last[1], "i": last[4]})
    return rows, token


def format_value(value: float, is_nan: bool) -> str:
    """A metric value as protobuf JSON writes doubles (NaN and infinities as strings)."""
    if is_nan or value != value:
        return '"NaN"'
    if value == math.inf:
        return '"Infinity"'
    if value == -math.inf:
        return '"-Infinity"'
    return repr(value)


def history_json(key: str, rows: Iterable[tuple]) -> Iterator[str]:
    """The `metrics` array of get-history, written directly (100k points in tens of milliseconds)."""
    k = json.dumps(key)
    for value, timestamp, step, is_nan, *_rest in rows:
        yield f'{{"key":{k},"value":{format_value(value, is_nan)},"timestamp":{timestamp},"step":{step}}}'
