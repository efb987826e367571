"""Payload logging's cost on the router's path, and the flush's cost per stored row.

    BENCH_REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python bench/payloads.py [--requests 20000] [--rounds 5]

In one event loop: the real router (`ServingRoute`, the real routing table and auth from a fresh database) in front
of a stub replica (an asyncio HTTP server answering a fixed 1-row iris answer, so the replica costs almost nothing),
driven by direct ASGI calls (no client sockets). Alternating rounds with payload logging at 0 % and 100 % of the
service's requests; prints µs per request of each (median over the rounds) and their difference. Then `flush()` of
the samples buffered by the 100 % rounds into PostgreSQL: µs per stored row (scrubbing, one bulk insert, the trim).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _env

ANSWER = b'{"model_name":"iris","outputs":[{"name":"output-0","shape":[1],"datatype":"INT64","data":[0]}]}'
BODY = b'{"inputs":[{"name":"input-0","shape":[1,4],"datatype":"FP64","data":[5.1,3.5,1.4,0.2]}]}'


async def stub_replica() -> tuple[asyncio.AbstractServer, int]:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in headers.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(head + ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def drive(router, scope: dict, count: int) -> float:
    sent = 0

    async def receive() -> dict:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict) -> None:
        nonlocal sent
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message
            sent += 1

    started = time.perf_counter()
    for _ in range(count):
        await router(scope, receive, send)
    elapsed = time.perf_counter() - started
    assert sent == count
    return elapsed / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each setting, alternating")
    args = parser.parse_args()
    _env.prepare("payloads")

    from django.contrib.auth import get_user_model

    from apps.accounts.services import create_token
    from apps.projects.services import create_project
    from apps.serving import payloads
    from apps.serving.models import InferenceService, PayloadLog, Replica, Revision
    from apps.serving.router.asgi import ServingRoute, invalidate

    user = get_user_model().objects.create_user("bench", password="x")
    project = create_project(user, name="Bench", slug="bench")
    token = create_token(user, name="bench")[1]

    async def run() -> None:
        server, port = await stub_replica()
        service = await asyncio.to_thread(
            lambda: InferenceService.objects.create(project=project, name="iris", status="ready")
        )

        def wire(percent: int) -> None:
            revision = service.current_revision or Revision.objects.create(service=service, number=1, status="ready")
            if not revision.replicas.exists():
                Replica.objects.create(revision=revision, index=0, upstream=f"http://127.0.0.1:{port}", status="ready")
            service.current_revision, service.payload_log_percent = revision, percent
            service.save()
            invalidate()

        async def app(scope, receive, send):  # never reached: every request is under /serving/
            raise AssertionError(scope["path"])

        router = ServingRoute(app)
        scope = {
            "type": "http", "method": "POST", "path": "/serving/bench/iris/v2/models/iris/infer", "root_path": "",
            "raw_path": b"/serving/bench/iris/v2/models/iris/infer", "query_string": b"", "scheme": "http",
            "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode()),
                        (b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())],
        }  # fmt: skip
        results: dict[int, list[float]] = {0: [], 100: []}
        for percent in (0, 100):  # warm-up: tables, auth, connections
            await asyncio.to_thread(wire, percent)
            await drive(router, scope, 500)
        await asyncio.to_thread(payloads.flush)
        for _ in range(args.rounds):
            for percent in (0, 100):
                await asyncio.to_thread(wire, percent)
                results[percent].append(await drive(router, scope, args.requests))
                if percent == 100:
                    buffered = payloads.pending()
                    started = time.perf_counter()
                    stored = await asyncio.to_thread(payloads.flush)
                    flush_us = (time.perf_counter() - started) / max(stored, 1) * 1e6
                    print(f"flush: {stored} rows ({buffered} buffered), {flush_us:.1f} µs/row")
        server.close()
        off, on = statistics.median(results[0]), statistics.median(results[100])
        print(f"router path, logging   0 %: {off:.1f} µs/request (rounds: {[round(x, 1) for x in results[0]]})")
        print(f"router path, logging 100 %: {on:.1f} µs/request (rounds: {[round(x, 1) for x in results[100]]})")
        print(f"cost of logging a request on the router's path: {on - off:+.1f} µs")
        count = await asyncio.to_thread(PayloadLog.objects.count)
        print(f"rows kept: {count} (service keeps {service.payload_log_keep} per revision)")

    asyncio.run(run())


if __name__ == "__main__":
    main()
