"""The router's HTTP/1.1 client against small asyncio servers that answer in the ways a replica may: chunked and
large bodies, keep-alive, a connection closed before the answer, one that never answers, a port nobody serves."""

from __future__ import annotations

import asyncio
import socket

import pytest

from apps.serving.router.upstream import HIGH_WATER, Pool, UpstreamError, UpstreamTimeout

BIG = bytes(range(256)) * (3 * HIGH_WATER // 256)  # three times what the client buffers before pausing


async def serve(handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def run(coroutine):
    return asyncio.run(coroutine)


def test_it_reuses_one_connection_for_sequential_requests_and_sends_the_body():
    async def scenario():
        connections, heads = [], []

        async def handler(reader, writer):
            connections.append(writer)
            while True:
                try:
                    head, body = await read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                heads.append(head)
                answer = b"echo:" + body
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nx-seen: 1\r\n\r\n%s" % (len(answer), answer))
                await writer.drain()

        server, port = await serve(handler)
        pool = Pool("127.0.0.1", port)
        bodies = []
        for i in range(5):
            response = await pool.request("POST", b"/v2/x", [(b"content-type", b"text/plain")], b"n%d" % i, 5)
            assert response.status == 200
            assert (b"x-seen", b"1") in response.headers
            bodies.append(await response.read())
        pool.close()
        server.close()
        return bodies, len(connections), heads[0], port

    bodies, connections, head, port = run(scenario())
    assert bodies == [b"echo:n0", b"echo:n1", b"echo:n2", b"echo:n3", b"echo:n4"]
    assert connections == 1
    assert (
        head
        == b"POST /v2/x HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\n" % port
    )


def test_a_chunked_answer_larger_than_the_buffer_streams_whole():
    async def scenario():
        async def handler(reader, writer):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for start in range(0, len(BIG), 65536):
                piece = BIG[start : start + 65536]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

        server, port = await serve(handler)
        pool = Pool("127.0.0.1", port)
        response = await pool.request("GET", b"/big", [], b"", 5)
        received = []
        async for chunk in response.chunks():
            received.append(chunk)
            await asyncio.sleep(0)  # a slow consumer: the client must pause reading, not buffer everything
        idle = len(pool.idle)
        server.close()
        return b"".join(received), idle

    body, idle = run(scenario())
    assert body == BIG
    assert idle == 1  # complete and keep-alive: back in the pool


def test_a_connection_closed_before_the_answer_is_retryable_and_a_refused_port_says_so():
    async def scenario():
        async def handler(reader, writer):
            await read_request(reader)
            writer.close()

        server, port = await serve(handler)
        with pytest.raises(UpstreamError) as closed:
            await Pool("127.0.0.1", port).request("POST", b"/", [], b"x", 5)
        server.close()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            free = sock.getsockname()[1]
        with pytest.raises(UpstreamError) as refused:
            await Pool("127.0.0.1", free).request("POST", b"/", [], b"x", 5)
        return closed.value, refused.value

    closed, refused = run(scenario())
    assert closed.retryable
    assert not closed.refused
    assert refused.retryable
    assert refused.refused


def test_an_answer_that_never_comes_times_out():
    async def scenario():
        async def handler(reader, writer):
            await read_request(reader)
            await asyncio.sleep(5)

        server, port = await serve(handler)
        with pytest.raises(UpstreamTimeout) as timeout:
            await Pool("127.0.0.1", port).request("POST", b"/", [], b"x", 0.2)
        server.close()
        return timeout.value

    error = run(scenario())
    assert not error.retryable
    assert "0.2 s" in str(error)


def test_the_cache_answers_stale_while_one_load_refreshes_it():
    from apps.serving.router.auth import TTLCache

    async def scenario():
        cache = TTLCache(0.2)
        loads = []

        async def load(previous):
            loads.append(previous)
            await asyncio.sleep(0.05)
            return len(loads)

        first = await asyncio.gather(*(cache.get("k", load) for _ in range(10)))  # one load for ten callers
        await asyncio.sleep(0.25)  # stale: answered at once, refreshed behind
        stale = await asyncio.gather(*(cache.get("k", load) for _ in range(10)))
        await asyncio.sleep(0.1)
        fresh = await cache.get("k", load)
        await asyncio.sleep(0.5)  # older than two TTLs: the caller waits for a load
        waited = await cache.get("k", load)
        return first, stale, fresh, waited, loads

    first, stale, fresh, waited, loads = run(scenario())
    assert first == [1] * 10
    assert stale == [1] * 10
    assert fresh == 2
    assert waited == 3
    assert loads == [None, 1, 2]


def test_routes_are_never_answered_stale():
    """The routing table's cache: past its TTL the caller waits for the load (shared by concurrent callers), since a
    stale table may name replicas already drained and stopped."""
    from apps.serving.router.auth import TTLCache

    async def scenario():
        cache = TTLCache(0.2, serve_stale=False)
        loads = []

        async def load(previous):
            loads.append(previous)
            await asyncio.sleep(0.05)
            return len(loads)

        first = await asyncio.gather(*(cache.get("k", load) for _ in range(10)))
        await asyncio.sleep(0.25)  # past the TTL, within two: still a fresh value, after one shared load
        second = await asyncio.gather(*(cache.get("k", load) for _ in range(10)))
        return first, second, loads

    first, second, loads = run(scenario())
    assert first == [1] * 10
    assert second == [2] * 10
    assert loads == [None, 1]
