"""`unflushed()`: a transaction whose commit does not wait for PostgreSQL's WAL flush, and only that one."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from portal.lib.asynccommit import unflushed

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit is PostgreSQL's"),
]


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_it_turns_the_wait_off_for_its_own_transaction_only():
    with unflushed():
        assert synchronous_commit() == "off"
    assert synchronous_commit() == "on"


def test_inside_another_transaction_it_leaves_that_ones_commit_alone():
    with transaction.atomic(), unflushed():
        assert synchronous_commit() == "on"
