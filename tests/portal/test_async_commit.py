"""`unflushed()`: a transaction whose commit does not wait for PostgreSQL's WAL flush, and only that one; and
`update_unflushed` / `execute_unflushed`, one statement committed so in one round trip."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Project
from portal.lib.asynccommit import execute_unflushed, unflushed, update_unflushed
from tests.factories import ProjectFactory

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


def statements_of(fn):
    with CaptureQueriesContext(connection) as ctx:
        result = fn()
    return result, [q["sql"] for q in ctx.captured_queries]


def test_an_update_outside_a_transaction_is_one_round_trip_that_commits_unflushed():
    project = ProjectFactory(slug="p-one", name="One")
    ProjectFactory(slug="p-two", name="Two")
    count, sql = statements_of(lambda: update_unflushed(Project.objects.filter(slug="p-one"), name="Renamed"))
    assert count == 1
    assert len(sql) == 1
    assert sql[0].startswith("SET LOCAL synchronous_commit = off; UPDATE")
    assert synchronous_commit() == "on"  # SET LOCAL held for that statement's implicit transaction only
    assert sorted(Project.objects.values_list("name", flat=True)) == ["Renamed", "Two"]
    project.refresh_from_db()
    with transaction.atomic():  # committed: another transaction sees it
        assert Project.objects.get(pk=project.pk).name == "Renamed"


def test_a_raw_statement_returns_its_row_count_and_an_empty_match_updates_nothing():
    ProjectFactory(slug="p-one", name="One")
    table = Project._meta.db_table
    assert execute_unflushed(f"UPDATE {table} SET name = %s WHERE slug = %s", ["X", "p-one"]) == 1
    assert execute_unflushed(f"UPDATE {table} SET name = %s WHERE slug = %s", ["X", "missing"]) == 0
    assert update_unflushed(Project.objects.filter(pk__in=[]), name="Y") == 0


def test_inside_a_transaction_the_update_is_part_of_it_and_rolls_back_with_it():
    ProjectFactory(slug="p-one", name="One")

    class Undo(Exception):
        pass

    def update_then_fail():
        with transaction.atomic():
            assert update_unflushed(Project.objects.filter(slug="p-one"), name="Renamed") == 1
            assert synchronous_commit() == "on"
            raise Undo

    with pytest.raises(Undo):
        update_then_fail()
    assert Project.objects.get(slug="p-one").name == "One"
