"""The model server writes each response in one `write` (apps/serving/modelserver/joined.py): uvicorn writes the head
and the body separately, and behind the sandbox's port forward (pasta, Nagle on) the body then waited ~40 ms for
the caller's delayed ACK on every keep-alive request. A real uvicorn server on a real socket, with the writes that
reach the socket's transport counted."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
from collections.abc import Iterator

import pytest
import uvicorn

from apps.serving.modelserver.__main__ import HTTP, bind
from apps.serving.modelserver.joined import JoinedHttpToolsProtocol

WRITES: list[bytes] = []  # what reached the socket's transport, one item per write
RELEASE = threading.Event()  # the streamed answer's second piece waits for it


class Counted:
    """The socket's transport, counting writes."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        WRITES.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class CountedProtocol(JoinedHttpToolsProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(Counted(transport))  # type: ignore[arg-type]


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    await receive()
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        await asyncio.get_running_loop().run_in_executor(None, RELEASE.wait, 30)
        await send({"type": "http.response.body", "body": b"second", "more_body": False})
        return
    body = b'{"outputs": [{"name": "predict", "data": [0]}]}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if scope["path"] == "/close":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def port() -> Iterator[int]:
    WRITES.clear()
    RELEASE.clear()
    sock = bind("127.0.0.1", 0)
    config = uvicorn.Config(app, http=CountedProtocol, loop="uvloop", lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        yield sock.getsockname()[1]
    finally:
        RELEASE.set()
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_the_model_server_runs_uvicorn_with_the_joined_protocol():
    config = uvicorn.Config(app, http=HTTP)
    config.load()
    assert config.http_protocol_class is JoinedHttpToolsProtocol


def test_each_keep_alive_response_is_one_write_holding_its_head_and_body(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for _ in range(3):
            conn.request("POST", "/v2/models/iris/infer", b'{"inputs": []}', {"content-type": "application/json"})
            answer = conn.getresponse()
            assert answer.status == 200
            assert answer.read() == b'{"outputs": [{"name": "predict", "data": [0]}]}'
    finally:
        conn.close()
    assert len(WRITES) == 3
    for write in WRITES:
        head, _sep, body = write.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"content-length: 47" in head.lower()
        assert body == b'{"outputs": [{"name": "predict", "data": [0]}]}'


def test_a_response_that_closes_the_connection_is_sent_whole_before_the_close(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"GET /close HTTP/1.1\r\nhost: x\r\n\r\n")
        received = b""
        while chunk := client.recv(65536):  # until the server closes
            received += chunk
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert received.endswith(b'{"outputs": [{"name": "predict", "data": [0]}]}')
    assert len(WRITES) == 1


def test_a_streamed_answer_is_not_held_back_its_pieces_go_out_as_they_are_made(port):
    """The second piece is made only once the client has read the first: a transport that held writes until the
    response ended would leave the client waiting (the read times out)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        received = b""
        while b"first;" not in received:
            received += client.recv(65536)
        assert b"second" not in received
        RELEASE.set()
        while not received.endswith(b"0\r\n\r\n"):
            received += client.recv(65536)
    assert b"second" in received
    assert len(WRITES) == 2  # the head with the first piece; the second piece with the chunked end
    assert WRITES[0].startswith(b"HTTP/1.1 200 OK")
    assert WRITES[0].endswith(b"6\r\nfirst;\r\n")
