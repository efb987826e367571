"""A time limit on each SQL statement a request runs, so that no request (a hostile search filter, a page of a
huge table) holds a database connection and a web worker for minutes.

`StatementTimeoutMiddleware` covers request-serving work only; the worker, the agent and `migrate` keep no limit,
as their long statements are legitimate. The limit is `PORTAL_REQUEST_STATEMENT_TIMEOUT` seconds (0: none).

- PostgreSQL enforces it itself: the first statement of a request sets the session's `statement_timeout` (outside
  any transaction, so that a later rollback cannot undo it) and the end of the request resets it. A thread that
  serves requests and nothing else (`keep_limit_on_this_thread`: the MLflow API's) keeps the limit on its
  connection instead, so its next request on that connection needs neither statement.
- SQLite has no such setting: the connection gets a progress handler that interrupts the statement running
  past the deadline its request set when the statement started (outside requests no deadline is set).

A statement stopped this way raises OperationalError, which the middleware answers with a 503 that says why
(MLflow's error shape under the MLflow API), instead of a 500.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _

logger = logging.getLogger(__name__)

# The monotonic time past which the running statement of this request is interrupted (SQLite), or None.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("statement_deadline", default=None)
# How many SQLite virtual-machine instructions between two looks at the clock.
_PROGRESS_STEPS = 10_000

# Threads that serve requests only (the MLflow API's long-lived threads): their connections keep the limit from
# one request to the next instead of a SET and a RESET around each (two round trips of a ~3-statement log_metric).
# `_kept` maps such a PostgreSQL connection (the DB-API object: a replaced connection starts without) to the limit
# its session has, in milliseconds; only a limit SET outside any transaction is kept (no rollback can undo it).
_serving_only = threading.local()
_kept: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def keep_limit_on_this_thread() -> None:
    """This thread serves requests and nothing else: its connections may keep the limit between requests."""
    _serving_only.keep = True


def _past_deadline() -> int:
    deadline = _deadline.get()
    return 1 if deadline is not None and time.monotonic() > deadline else 0


def is_statement_timeout(exc: BaseException) -> bool:
    """Whether `exc` is a statement stopped by the limit (PostgreSQL's query_canceled, SQLite's interrupt)."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) == "57014":  # query_canceled
        return True
    return "interrupted" in str(exc)


class _StatementGuard:
    """An execute wrapper (one per request) that applies the limit to each statement on one connection."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.applied_to: Any = None  # the DB-API connection that has the limit (PostgreSQL: its session's)
        self.in_transaction: Any = None  # PostgreSQL: the connection whose open transaction set the limit

    def __call__(self, execute: Callable, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        connection = context["connection"]
        if connection.vendor == "postgresql":
            self._apply_postgresql(connection)
        elif connection.vendor == "sqlite" and self.applied_to is not connection.connection:
            connection.connection.set_progress_handler(_past_deadline, _PROGRESS_STEPS)
            self.applied_to = connection.connection
        _deadline.set(time.monotonic() + self.seconds)
        return execute(sql, params, many, context)

    def _apply_postgresql(self, connection: Any) -> None:
        """SET the session's limit: once outside a transaction, where it is committed at once and no rollback
        can undo it. A request whose first statements run in a transaction sets it there too, once per
        transaction (a rollback of that transaction takes it back, and the next statement outside sets it)."""
        raw = connection.connection
        if self.applied_to is raw:
            return
        ms = int(self.seconds * 1000)
        if _kept.get(raw) == ms:  # the session has it since an earlier request of this thread
            self.applied_to = raw
            return
        if connection.in_atomic_block:
            if self.in_transaction is raw:
                return
            self.in_transaction = raw
        else:
            self.in_transaction = None
            self.applied_to = raw
        _kept.pop(raw, None)
        with raw.cursor() as cursor:
            cursor.execute(f"SET statement_timeout = {ms}")

    def reset(self, connection: Any) -> None:
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return
        if self.applied_to is None or self.applied_to is not connection.connection:
            return
        if getattr(_serving_only, "keep", False):
            _kept[self.applied_to] = int(self.seconds * 1000)
            return
        try:
            with connection.connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")
        except Exception:  # a broken connection is closed and replaced anyway
            logger.debug("could not reset statement_timeout", exc_info=True)


def _drop_kept(connection: Any) -> None:
    """No limit for this request: a session that kept one from an earlier request loses it."""
    raw = connection.connection
    if raw is None or raw not in _kept or connection.in_atomic_block:
        return
    del _kept[raw]
    try:
        with raw.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
    except Exception:  # a broken connection is closed and replaced anyway
        logger.debug("could not reset statement_timeout", exc_info=True)


class StatementTimeoutMiddleware:
    """Limit each statement of a request to `PORTAL_REQUEST_STATEMENT_TIMEOUT` seconds; a stopped one is a 503."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        seconds = settings.PORTAL_REQUEST_STATEMENT_TIMEOUT
        connection = connections[DEFAULT_DB_ALIAS]
        if not seconds or seconds <= 0:
            _drop_kept(connection)
            return self.get_response(request)
        guard = _StatementGuard(seconds)
        token = _deadline.set(None)
        try:
            with connection.execute_wrapper(guard):
                return self.get_response(request)
        finally:
            _deadline.reset(token)
            guard.reset(connection)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_statement_timeout(exception):
            return None
        seconds = settings.PORTAL_REQUEST_STATEMENT_TIMEOUT
        message = _("The database took longer than %(seconds)s s for this request; narrow it down.") % {
            "seconds": seconds
        }
        logger.warning("statement timeout (%ss) on %s %s", seconds, request.method, request.path)
        if "/mlflow" in request.path:
            return JsonResponse({"error_code": "TEMPORARILY_UNAVAILABLE", "message": message}, status=503)
        return JsonResponse({"detail": message}, status=503)
