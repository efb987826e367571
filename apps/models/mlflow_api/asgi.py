"""`MlflowApiRoute`: the MLflow REST API (`/api/2.0/mlflow/…`, `/ajax-api/2.0/mlflow/…`) served on a few threads
that keep their database connections from one request to the next.

Django's ASGI handler runs each request's synchronous code on a thread of its own (asgiref's
`ThreadSensitiveContext`, one per request), and database connections belong to a thread: every request opened a
connection and closed it. The official client sends one request per `log_metric`, so that was most of the call:
opening a PostgreSQL connection measured ~10 ms here, the rest of the request ~3 ms.

Here the request goes through the same things as any other: Django's whole middleware chain, loaded in its
synchronous mode as a WSGI server runs it (authentication, audit, statement timeout, language, security headers),
the same URL resolution and view, `request_started` / `request_finished`. Only the thread differs: one of
`PORTAL_MLFLOW_API_THREADS` long-lived threads, each request in a copy of the caller's context (as
`asyncio.to_thread` runs it). A thread keeps its connections while busy (closed past `CONN_KEEP_S` as Django's
CONN_MAX_AGE would, or at once when unusable) and closes them after `IDLE_CLOSE_S` without work, so an idle web
process holds none. Artifacts (`/api/2.0/mlflow-artifacts/…`) are streamed and stay on Django's path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import connections
from django.http import HttpResponse
from django.urls import set_script_prefix

from portal.lib.dbtimeout import keep_limit_on_this_thread

logger = logging.getLogger(__name__)

PATH = re.compile(r"^/(?:ajax-)?api/2\.0/mlflow/")
CONN_KEEP_S = 300  # a connection is replaced after this long (Django's CONN_MAX_AGE)
HEALTH_FRESH_S = 1.0  # a connection a request of this thread ended with this recently is not health-checked again
IDLE_CLOSE_S = 30.0  # a thread without work this long closes its connections

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


_ALL_THREADS: weakref.WeakSet[ApiThreads] = weakref.WeakSet()


def close_api_connections() -> None:
    """Every `ApiThreads` closes its threads' database connections now (a test server stopped)."""
    for threads in list(_ALL_THREADS):
        threads.close_connections()


class ApiThreads:
    """A fixed number of threads (started as work arrives) running functions for the event loop."""

    def __init__(self, size: int, idle_close_s: float = IDLE_CLOSE_S) -> None:
        _ALL_THREADS.add(self)
        self.size = max(1, size)
        self.idle_close_s = idle_close_s
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        """`fn(*args)` on one of the threads, in a copy of the current context; await the result."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(target=self._work, name=f"mlflow-api-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put((loop, future, contextvars.copy_context(), fn, args))
        return future

    def close_connections(self, timeout: float = 10) -> None:
        """Make every started thread close its database connections now (a test server stopping)."""
        done = []
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            event = threading.Event()
            done.append(event)
            self._jobs.put((None, event, None, None, ()))
        for event in done:
            event.wait(timeout)

    def _work(self) -> None:
        keep_limit_on_this_thread()
        for alias in connections:  # this thread's own connection objects: kept past the request
            wrapper = connections[alias]
            max_age = wrapper.settings_dict.get("CONN_MAX_AGE")
            if max_age is not None and max_age < CONN_KEEP_S:
                wrapper.settings_dict = {**wrapper.settings_dict, "CONN_MAX_AGE": CONN_KEEP_S}
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self.idle_close_s)
            except queue.Empty:
                connections.close_all()
                continue
            finally:
                with self._lock:
                    self._idle -= 1
            loop, future, context, fn, args = job
            if loop is None:  # close_connections()
                connections.close_all()
                future.set()
                continue
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # handed to the awaiting coroutine
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class _SyncHandler(ASGIHandler):
    """ASGIHandler's request reading and response sending around the synchronous middleware chain."""

    def __init__(self) -> None:  # not ASGIHandler's: the middleware chain is loaded for synchronous calls
        self.load_middleware(is_async=False)

    def serve(self, scope: Scope, body_file: Any) -> HttpResponse:
        """What `ASGIHandler.handle` does between reading the body and sending, on this thread."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=ASGIHandler, scope=scope)
        _skip_fresh_health_checks()
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            response = error_response
        else:
            response = self.get_response(request)
            response._handler_class = ASGIHandler
        if not response.streaming:
            response.close()  # request_finished on this thread: its connections are the ones to keep or close
            _ended.at = time.monotonic()
        return response


_ended = threading.local()  # when the last request of this thread ended, its connections kept (monotonic)


def _skip_fresh_health_checks() -> None:
    """Django checks a kept connection (`SELECT 1`) before each request's first statement (CONN_HEALTH_CHECKS).
    A connection that the previous request of this thread ended with less than HEALTH_FRESH_S ago was usable
    then (request_finished closes one that failed), so that round trip (a fifth of a log_metric's time on
    PostgreSQL under load) is skipped. The database going away in that second fails this one request (the
    middleware answers 503/500; the official client retries), and request_finished replaces the connection."""
    ended = getattr(_ended, "at", None)
    if ended is None or time.monotonic() - ended > HEALTH_FRESH_S:
        return
    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is not None and wrapper.health_check_enabled:
            wrapper.health_check_done = True


class MlflowApiRoute:
    """Sends MLflow API requests to `ApiThreads`, everything else to `app`."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.threads = ApiThreads(settings.PORTAL_MLFLOW_API_THREADS)
        self._handler: _SyncHandler | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not PATH.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self._handler is None:
            self._handler = _SyncHandler()
        handler = self._handler
        try:
            body_file = await handler.read_body(receive)
        except RequestAborted:
            return
        try:
            response = await self.threads.run(handler.serve, scope, body_file)
            try:
                await handler.send_response(response, send)
            finally:
                if response.streaming:
                    await self.threads.run(response.close)
        finally:
            body_file.close()
