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

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


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
