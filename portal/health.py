"""/healthz (the process answers) and /readyz (database, broker and channel layer reachable; under `make run`,
every process of the Procfile running; Label Studio's state named under "labelstudio")."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.celery import app as celery_app

CHECK_TIMEOUT = 3.0


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def check_broker() -> None:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT)


async def _layer_round_trip() -> None:
    """Run in a task with a context of its own: the SQLite layer's receive starts a background poller that copies the
    current context, and under a request that context binds its database calls (sync_to_async) to the request's
    thread executor, which is gone after the response ("CurrentThreadExecutor already quit"): every later /readyz of
    the process then timed out on the channel layer."""
    await asyncio.create_task(_round_trip(), context=contextvars.Context())


async def _round_trip() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("readyz.")
    await layer.send(channel, {"type": "readyz.ping"})
    message = await asyncio.wait_for(layer.receive(channel), CHECK_TIMEOUT)
    if message.get("type") != "readyz.ping":
        raise RuntimeError(f"unexpected message {message!r}")


def supervised_processes() -> dict[str, Any]:
    """The supervisor's view of the processes `make run` started (portal/supervise.py writes it)."""
    return json.loads(Path(settings.PORTAL_SUPERVISOR_STATE).read_text())["processes"]


def check_processes() -> None:
    down = []
    for name, process in supervised_processes().items():
        if process["state"] == "running":
            continue
        last = process.get("last_exit") or {}
        how = f"signal {last['signal']}" if last.get("signal") else f"exit code {last['code']}" if last else ""
        detail = ", ".join(part for part in (f"last {how}" if how else "", f"{process['restarts']} restarts") if part)
        down.append(f"{name} {process['state']} ({detail})")
    if down:
        raise ProcessDown("; ".join(down))


def check_sandbox() -> None:
    """Not ready when the local runtime must sandbox workloads and cannot (PORTAL_LOCAL_SANDBOX=required): it runs
    none. Without a sandbox in mode "auto" the portal works (one project's workloads): the body says so."""
    from apps.runtime.local import sandbox  # only where the local runtime runs workloads

    current = sandbox.state()
    if current["mode"] == "required" and not current["isolated"]:
        raise SandboxMissing(str(current["detail"]))


class SandboxMissing(RuntimeError):
    """The local sandbox is required and this host cannot provide it."""


class ProcessDown(RuntimeError):
    """A process of the Procfile is not running (it is starting, or waiting to restart after an exit)."""


CHECKS: dict[str, Callable[[], None]] = {
    "database": check_database,
    "broker": check_broker,
}


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


async def _timed(check: Callable[[], Awaitable[None]]) -> dict[str, object]:
    started = time.perf_counter()
    try:
        await asyncio.wait_for(check(), CHECK_TIMEOUT + 1)
    except Exception as exc:  # any failure means "not ready", reported as such
        result: dict[str, object] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    else:
        result = {"ok": True}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


@require_GET
@never_cache
async def readyz(request: HttpRequest) -> JsonResponse:
    """Async: the channel layer is exercised on the server's own event loop, where its connections live."""
    results = {name: await _timed(sync_to_async(check)) for name, check in CHECKS.items()}
    results["channel_layer"] = await _timed(_layer_round_trip)
    body: dict[str, Any] = {"checks": results}
    if settings.PORTAL_RUNTIME == "local":  # whether local workloads are isolated from each other (docs/security.md)
        from apps.runtime.local import sandbox  # only where the local runtime runs workloads

        results["sandbox"] = await _timed(sync_to_async(check_sandbox))
        body["sandbox"] = await sync_to_async(sandbox.state)()
    if settings.PORTAL_SUPERVISOR_STATE:  # started by `make run`: every process it supervises counts
        results["processes"] = await _timed(sync_to_async(check_processes))
        with suppress(OSError, ValueError, KeyError):  # the check above already says why
            processes = await sync_to_async(supervised_processes)()
            # Anyone may ask (a load balancer's probe): the state, not the host's pids and command lines.
            body["processes"] = {
                name: {key: value for key, value in process.items() if key not in {"pid", "command"}}
                for name, process in processes.items()
            }
    if settings.LABELING != "off":
        # Named, not counted: labeling pages say when Label Studio is down and the rest of the portal works on (under
        # `make run` its process still counts among "processes" while it starts).
        from apps.labeling.server import state as labelstudio_state  # only where labeling is on

        body["labelstudio"] = await sync_to_async(labelstudio_state)()
    ready = all(r["ok"] for r in results.values())
    return JsonResponse({"status": "ready" if ready else "not ready", **body}, status=200 if ready else 503)
