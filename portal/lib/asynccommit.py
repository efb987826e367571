"""Commits that do not wait for PostgreSQL's WAL flush, for writes whose loss in a crash of the database server the
code that makes them repairs.

With `synchronous_commit = off` a commit returns before its WAL record is on disk (a few milliseconds less per
commit on a slow disk). The write is still atomic and at once visible to every other connection; only a crash of the
PostgreSQL server (not of our process) within a fraction of a second (3 × `wal_writer_delay`) can lose it. What
makes it safe to reason about: the WAL is one sequence replayed in order, so a crash that loses a commit loses every
commit made after it as well, on any connection, and a later synchronous commit flushes every earlier one. A write
may commit this way when every write that depends on it comes after it, and losing it (with whatever came after)
leaves state that the code repairs on its own (a lease that runs out, a message sent twice to an idempotent task).
Never for data a user made or sees that could not be rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery

# Sent in the same simple-protocol query as the statement: PostgreSQL runs a query of several statements as one
# implicit transaction, so SET LOCAL holds for the statement's commit and nothing else.
_OFF = "SET LOCAL synchronous_commit = off; "


@contextmanager
def unflushed() -> Iterator[None]:
    """A transaction whose commit does not wait for the WAL flush (`SET LOCAL synchronous_commit = off`, for this
    transaction only; elsewhere than PostgreSQL a plain transaction). Inside another transaction it is part of that
    one, whose durability it leaves alone."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit = off")
        yield


def execute_unflushed(sql: str, params: Sequence[Any] = ()) -> int:
    """One data-changing statement (`sql` with `params`) committed as `unflushed` commits it, and its row count.

    Outside a transaction on PostgreSQL that is ONE round trip: the SET LOCAL and the statement go in one query,
    which PostgreSQL runs as one implicit transaction (`unflushed` costs four: BEGIN, SET LOCAL, the statement,
    COMMIT). Inside a transaction, or elsewhere, it is `unflushed()` around the statement. Needs Django's default
    client-side parameter binding (psycopg's ClientCursor), which sends a query of several statements.
    """
    with connection.cursor() as cursor:
        if (
            connection.vendor == "postgresql"
            and not connection.in_atomic_block
            and isinstance(cursor.cursor, psycopg.ClientCursor)
        ):
            cursor.execute(_OFF + sql, params)
            cursor.nextset()  # the statement's result, after the SET's
            return cursor.rowcount
    with unflushed(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def update_unflushed(queryset: QuerySet, **values: Any) -> int:
    """`queryset.update(**values)` committed as `execute_unflushed` commits (one round trip outside a transaction
    on PostgreSQL), for a plain model's rows (no multi-table inheritance: its parents' rows would need statements
    of their own). Returns the number of rows updated."""
    if queryset.model._meta.parents:
        raise ValueError("update_unflushed does not update the parents of a multi-table model")
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    query.clear_ordering(force=True)
    try:
        sql, params = query.get_compiler(queryset.db).as_sql()
    except EmptyResultSet:  # it matches nothing by construction (pk__in=[]), as update() answers
        return 0
    return execute_unflushed(sql, params)
