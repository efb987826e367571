"""portal/lib/dbtimeout.py: each SQL statement of a request is stopped past PORTAL_REQUEST_STATEMENT_TIMEOUT and
the request answers 503 saying why; work outside requests keeps no limit."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.http import HttpResponse
from django.test import RequestFactory

from portal.lib.dbtimeout import StatementTimeoutMiddleware, is_statement_timeout, keep_limit_on_this_thread

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


def session_limit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def on_a_thread(work):
    """`work()` on a thread of its own (its own connection, closed after), returning what it returned."""
    result: dict = {}

    def target():
        try:
            result["value"] = work()
        except BaseException as exc:  # re-raised on the test's thread
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in result:
        raise result["error"]
    return result["value"]


def quick_view():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return HttpResponse("ok")


@pytest.mark.django_db(transaction=True)
def test_a_thread_that_only_serves_requests_keeps_the_limit_between_them(limit):
    if connection.vendor != "postgresql":
        pytest.skip("a session setting of PostgreSQL's")

    def work():
        keep_limit_on_this_thread()
        middleware_answer(quick_view)
        kept = session_limit()  # between requests: still there, no RESET was sent
        slow = middleware_answer(lambda: (slow_statement(), HttpResponse("finished"))[1])  # the kept limit holds
        limit.PORTAL_REQUEST_STATEMENT_TIMEOUT = 0  # no limit any more: the next request drops the kept one
        middleware_answer(quick_view)
        return kept, slow.status_code, session_limit()

    assert on_a_thread(work) == ("300ms", 503, "0")


@pytest.mark.django_db(transaction=True)
def test_any_other_thread_gives_the_limit_back_after_each_request(limit):
    if connection.vendor != "postgresql":
        pytest.skip("a session setting of PostgreSQL's")

    def work():
        middleware_answer(quick_view)
        return session_limit()

    assert on_a_thread(work) == "0"
