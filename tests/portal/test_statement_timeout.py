"""portal/lib/dbtimeout.py: each SQL statement of a request is stopped past PORTAL_REQUEST_STATEMENT_TIMEOUT and
the request answers 503 saying why; work outside requests keeps no limit."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError, connection, transaction
from django.http import HttpResponse
from django.test import RequestFactory

from portal.lib.dbtimeout import StatementTimeoutMiddleware, is_statement_timeout

# Several seconds of work on either database, interrupted well before it ends.
SLOW_SQL = {
    "postgresql": "SELECT pg_sleep(5)",
    "sqlite": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
        " SELECT max(x) FROM (SELECT x FROM c LIMIT 100000000)"
    ),
}


def slow_statement() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(SLOW_SQL[connection.vendor])


@pytest.fixture
def limit(settings):
    settings.PORTAL_REQUEST_STATEMENT_TIMEOUT = 0.3
    return settings


def middleware_answer(view):
    middleware = StatementTimeoutMiddleware(lambda request: view())
    request = RequestFactory().get("/api/v1/anything/")
    try:
        return middleware(request)
    except OperationalError as exc:
        return middleware.process_exception(request, exc)


def test_a_slow_statement_in_a_request_is_stopped_and_answered_503(db, limit):
    def view():
        slow_statement()
        return HttpResponse("finished")

    response = middleware_answer(view)

    assert response.status_code == 503
    assert "longer than 0.3 s" in json.loads(response.content)["detail"]


def test_quick_statements_of_a_request_are_untouched(db, limit):
    def view():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return HttpResponse(str(cursor.fetchone()[0]))

    assert middleware_answer(view).content == b"1"


def test_without_a_request_there_is_no_limit(db, limit):
    def view():
        return HttpResponse("ok")

    middleware_answer(view)
    with connection.cursor() as cursor:  # after the request: the quick path, and no stale deadline
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_other_database_errors_are_not_taken_for_a_timeout():
    assert not is_statement_timeout(OperationalError("no such table: x"))
    assert not is_statement_timeout(ValueError("interrupted"))
