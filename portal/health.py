"""/healthz (the process answers) and /readyz (database, broker and channel layer reachable)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
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
    layer = get_channel_layer()
    channel = await layer.new_channel("readyz.")
    await layer.send(channel, {"type": "readyz.ping"})
    message = await asyncio.wait_for(layer.receive(channel), CHECK_TIMEOUT)
    if message.get("type") != "readyz.ping":
        raise RuntimeError(f"unexpected message {message!r}")


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
    ready = all(r["ok"] for r in results.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": results}, status=200 if ready else 503)
