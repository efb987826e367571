"""Every SQLite database of the embedded mode (the portal's, and the channel layer's) begins its transactions
IMMEDIATE: a deferred transaction that reads, then writes, fails at once with "database is locked" when another
process wrote in between (WAL does not wait for a stale snapshot). The channel layer's group_add is such a
transaction (a get_or_create): under load a websocket's handshake answered 500 because of it."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connections

from portal import settings as portal_settings


def sqlite_aliases() -> list[str]:
    return [alias for alias, db in portal_settings.DATABASES.items() if db["ENGINE"].endswith("sqlite3")]


@pytest.mark.skipif(not sqlite_aliases(), reason="no SQLite database is configured (DATABASE_URL and REDIS_URL set)")
@pytest.mark.parametrize("alias", sqlite_aliases())
def test_each_sqlite_database_begins_its_transactions_immediate(alias):
    options = portal_settings.DATABASES[alias]["OPTIONS"]
    assert options.get("transaction_mode") == "IMMEDIATE", alias
    assert options.get("timeout", 5) >= 20  # a writer waits for another rather than failing


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_read_then_write_transaction_does_not_fail_on_another_connections_commit():
    """What IMMEDIATE prevents, on the channel layer's database when it is SQLite: A reads in a transaction, B (another
    connection, as another process would) writes and commits, then A writes. Deferred, A's write would fail at once;
    immediate, A holds the write lock from its first statement, so B waits for A (here: gives up at once, timeout 0)
    and A's write succeeds."""
    if "channels" not in connections.databases or connections["channels"].vendor != "sqlite":
        pytest.skip("the channel layer is not on SQLite here")
    from django.db import transaction

    other = connections.create_connection("channels")
    # B gives up at once instead of waiting: what is measured is whether A holds the write lock from its start.
    other.settings_dict = {**other.settings_dict, "OPTIONS": {**other.settings_dict["OPTIONS"], "timeout": 0}}
    try:
        with connections["channels"].cursor() as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS immediate_probe (n INTEGER)")
        with transaction.atomic(using="channels"), connections["channels"].cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM immediate_probe")
            # IMMEDIATE: A already holds the write lock, so B cannot get in.
            with other.cursor() as intruder, pytest.raises(OperationalError, match="locked"):
                intruder.execute("INSERT INTO immediate_probe VALUES (2)")
            cursor.execute("INSERT INTO immediate_probe VALUES (1)")  # A's write after its read succeeds
        with other.cursor() as intruder:
            intruder.execute("INSERT INTO immediate_probe VALUES (2)")
            intruder.execute("SELECT n FROM immediate_probe ORDER BY n")
            assert [row[0] for row in intruder.fetchall()] == [1, 2]
    finally:
        other.close()
        with connections["channels"].cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS immediate_probe")
