"""What the notebook proxy passes on and what it keeps back, seen from a real upstream that reports it.

An echo HTTP server and an echo websocket server stand in for the notebook server (they run on loopback, in
threads): they answer with what reached them, so each test checks the relay byte for byte — headers, raw paths,
bodies, cookies, close codes — which JupyterLab itself would not show.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

from apps.notebooks.models import Notebook
from apps.notebooks.proxy import TokenScrubber

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

TOKEN = "0123456789abcdef0123456789abcdef0123456789abcdef"


class EchoHandler(BaseHTTPRequestHandler):
    """Every method: `{"method", "path", "headers", "body_sha256", "body_length"}` as JSON, also put on `seen`
    (the proxy blanks the token out of the answer, so a test reads what arrived from there); a few paths act."""

    protocol_version = "HTTP/1.1"
    seen: queue.Queue = queue.Queue()

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def handle_any(self) -> None:
        body = self.read_body()
        if self.path.startswith("/notebook/9001/cookies"):
            return self.send_cookies()
        if self.path.startswith("/notebook/9001/slow"):
            return self.send_slowly()
        if self.path.startswith("/notebook/9001/token"):
            return self.send_token_in_pieces()
        report = {
            "method": self.command,
            "path": self.path,
            "headers": [[k.lower(), v] for k, v in self.headers.items()],
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_length": len(body),
        }
        self.seen.put(report)
        payload = json.dumps(report).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_cookies(self) -> None:
        self.send_response(302)
        self.send_header("Location", f"http://{self.headers['Host']}/notebook/9001/lab?x=1")
        self.send_header(
            "Set-Cookie", "_xsrf=2|ab|cd|1796079644; expires=Wed, 30 Dec 2026 23:00:44 GMT; Path=/notebook/9001/"
        )
        self.send_header("Set-Cookie", 'username-x="2|1:0|10:179==|ab"; HttpOnly; Path=/notebook/9001/')
        self.send_header("Set-Cookie", f"{settings.SESSION_COOKIE_NAME}=planted; Path=/")
        self.send_header("Access-Control-Allow-Origin", "http://evil.example")
        self.send_header("Access-Control-Allow-Credentials", "true")
        self.send_header("X-Echo", f"see ?token={TOKEN}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_slowly(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"first\n", b"second\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            time.sleep(1.5)
        self.wfile.write(b"0\r\n\r\n")

    def send_token_in_pieces(self) -> None:
        body = f'<script>{{"token": "{TOKEN}", "wsUrl": ""}}</script> and {TOKEN}!'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for cut in range(0, len(body), 7):  # the token arrives split across several writes
            self.wfile.write(body[cut : cut + 7])
            self.wfile.flush()
            time.sleep(0.002)


@pytest.fixture(scope="module")
def echo_http() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class EchoSocket:
    """A websocket server that echoes every frame as it came (text or binary), closes with `close:<code>:<reason>`,
    and reports each handshake's headers and the close code it received."""

    def __init__(self) -> None:
        self.handshakes: queue.Queue = queue.Queue()
        self.closes: queue.Queue = queue.Queue()
        self.server = serve(self.handle, "127.0.0.1", 0, subprotocols=["b"], compression=None)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"

    def drain(self) -> None:
        for reports in (self.handshakes, self.closes):
            while not reports.empty():
                reports.get_nowait()

    def handle(self, ws: ServerConnection) -> None:
        self.handshakes.put((ws.request.path, {k.lower(): v for k, v in ws.request.headers.raw_items()}))
        try:
            for message in ws:
                if isinstance(message, str) and message.startswith("close:"):
                    _, code, reason = message.split(":", 2)
                    ws.close(int(code), reason)
                    return
                ws.send(message)
        except ConnectionClosed:
            pass
        self.closes.put(ws.close_code)


@pytest.fixture(scope="module")
def echo_ws() -> Iterator[EchoSocket]:
    echo = EchoSocket()
    yield echo
    echo.server.shutdown()


@pytest.fixture
def http_notebook(world, echo_http) -> Notebook:
    return Notebook.objects.create(
        pk=9001,
        project=world.project_a,
        owner=world.alice,
        name="echo",
        status="running",
        upstream=echo_http,
        token=TOKEN,
    )


@pytest.fixture
def ws_notebook(world, echo_ws) -> Notebook:
    return Notebook.objects.create(
        pk=9002,
        project=world.project_a,
        owner=world.alice,
        name="echo-ws",
        status="running",
        upstream=echo_ws.url,
        token=TOKEN,
    )


def alice_cookies(world) -> dict[str, str]:
    client = Client()
    client.force_login(world.alice)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


@pytest.fixture
def alice(live_asgi, world) -> Iterator[httpx.Client]:
    session = alice_cookies(world)[settings.SESSION_COOKIE_NAME]
    cookie = f"{settings.SESSION_COOKIE_NAME}={session}; csrftoken=portalcsrf; _xsrf=jupyters; theme=dark"
    headers = {"Origin": live_asgi.url, "Cookie": cookie}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=30) as client:
        yield client


# --- HTTP ------------------------------------------------------------------------------------------------------


def test_the_request_goes_up_as_sent_less_the_portals_credentials(alice, http_notebook):
    while not EchoHandler.seen.empty():
        EchoHandler.seen.get_nowait()
    body = os.urandom(3 * 1024 * 1024 + 17)  # past the in-memory spool: sent up in chunks
    response = alice.post(
        "/notebook/9001/api/contents/a%20b%25c/%E2%9C%93.txt?x=1&y=%2F&x=2",
        content=body,
        headers={"X-CSRFToken": "portalcsrf", "Authorization": "Bearer portal-api-token", "X-Custom": "kept"},
    )
    assert response.status_code == 200, response.text
    seen = EchoHandler.seen.get(timeout=5)
    assert response.json() == json.loads(json.dumps(seen).replace(TOKEN, "*" * len(TOKEN)))  # the answer, scrubbed
    headers = dict(seen["headers"])
    assert seen["method"] == "POST"
    assert seen["path"] == "/notebook/9001/api/contents/a%20b%25c/%E2%9C%93.txt?x=1&y=%2F&x=2"  # raw, unchanged
    assert seen["body_length"] == len(body)
    assert seen["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert headers["authorization"] == f"token {TOKEN}"  # the server's token replaces the portal's credentials
    assert headers["cookie"] == "_xsrf=jupyters; theme=dark"  # no portal session, no portal CSRF cookie
    assert "x-csrftoken" not in headers
    assert "origin" not in headers  # checked by the portal; Jupyter would compare it with its own host
    assert headers["accept-encoding"] == "identity"
    assert headers["x-custom"] == "kept"
    assert headers["host"] == http_notebook.upstream.removeprefix("http://")


def test_cookies_redirects_and_cors_headers_come_back_cleaned(alice, http_notebook):
    response = alice.get("/notebook/9001/cookies")
    assert response.status_code == 302
    assert response.headers["location"] == "/notebook/9001/lab?x=1"  # the server's absolute URL became a path
    cookies = response.headers.get_list("set-cookie")
    assert "_xsrf=2|ab|cd|1796079644; expires=Wed, 30 Dec 2026 23:00:44 GMT; Path=/notebook/9001/" in cookies
    assert 'username-x="2|1:0|10:179==|ab"; HttpOnly; Path=/notebook/9001/' in cookies  # byte for byte
    assert not any(c.startswith(settings.SESSION_COOKIE_NAME) for c in cookies)  # no planted portal session
    assert not any(h.startswith("access-control-") for h in response.headers)
    assert response.headers["x-echo"] == "see ?token="
    assert TOKEN not in str(response.headers)


def test_the_token_is_blanked_even_split_across_chunks(alice, http_notebook):
    response = alice.get("/notebook/9001/token")
    assert response.status_code == 200
    assert TOKEN not in response.text
    assert (
        response.text
        == '<script>{"token": ""' + " " * len(TOKEN) + ', "wsUrl": ""}</script> and ' + "*" * len(TOKEN) + "!"
    )
    assert int(response.headers["content-length"]) == len(response.content)


def test_the_response_streams_as_it_is_produced(alice, http_notebook):
    started = time.monotonic()
    with alice.stream("GET", "/notebook/9001/slow") as response:
        chunks = response.iter_text()
        assert next(chunks) == "first\n"
        first_after = time.monotonic() - started
        rest = "".join(chunks)
    assert first_after < 1.2, first_after  # not held back until the upstream finished (3 s)
    assert rest == "second\n"


def test_dot_segments_are_refused(alice, http_notebook):
    assert alice.get("/notebook/9001/a/%2e%2e/b").status_code == 404
    assert alice.get("/notebook/9001/a/%2E/b").status_code == 404
    assert alice.get("/notebook/9001/a..b/c").status_code == 200


def test_head_and_options_pass(alice, http_notebook):
    head = alice.head("/notebook/9001/x")
    assert head.status_code == 200
    assert head.content == b""
    assert alice.options("/notebook/9001/x", headers={"Origin": "http://evil.example"}).status_code == 200


def test_the_no_slash_root_redirects_to_the_slash(alice, http_notebook):
    response = alice.get("/notebook/9001")
    assert response.status_code == 301
    assert response.headers["location"] == "/notebook/9001/"


@pytest.mark.parametrize("token", [TOKEN, "ab" * 24, "a" * 48, "xyz"], ids=["random", "periodic", "one-char", "short"])
@pytest.mark.parametrize("cut_every", [1, 2, 5, 13, 64, 10_000])
def test_token_scrubber_finds_tokens_across_any_split(token, cut_every):
    t = token.encode()
    body = (b'x"token": "' + t + b'"y ' + t + b' "tok' + b'"token": "' + t + t + b"z" * 40) * 3 + b'"token": "' + t
    scrubber = TokenScrubber(token)
    out = b"".join(scrubber.feed(body[i : i + cut_every]) for i in range(0, len(body), cut_every)) + scrubber.flush()
    assert len(out) == len(body)
    assert t not in out
    assert out.count(b'"token": ""' + b" " * len(t)) == 3
    expected = b'x"token": ""' + b" " * len(t) + b"y " + b"*" * len(t) + b' "tok"token": "' + b"*" * 2 * len(t)
    assert out == (expected + b"z" * 40) * 3 + b'"token": "' + b"*" * len(t)


def test_token_scrubber_holds_nothing_back_without_a_token():
    scrubber = TokenScrubber(TOKEN)
    assert scrubber.feed(b"plain text, no secret\n") == b"plain text, no secret\n"
    assert scrubber.feed(b"ends with a quote: ") == b"ends with a quote: "


# --- Websockets -----------------------------------------------------------------------------------------------


def open_echo(live, world, protocols=("a", "b"), path: str = "/notebook/9002/api/kernels/k/channels?session_id=s"):
    client = Client()
    client.force_login(world.alice)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}; _xsrf=x"
    headers = {"Origin": live.url, "Cookie": cookie}
    return connect(f"{live.ws_url}{path}", additional_headers=headers, subprotocols=list(protocols), open_timeout=10)


def test_frames_are_relayed_in_order_with_their_types(live_asgi, world, ws_notebook, echo_ws):
    echo_ws.drain()
    with open_echo(live_asgi, world) as ws:
        assert ws.subprotocol == "b"  # the upstream's choice among those the browser offered
        path, headers = echo_ws.handshakes.get(timeout=5)
        assert path == "/notebook/9002/api/kernels/k/channels?session_id=s"
        assert headers["authorization"] == f"token {TOKEN}"
        assert headers["cookie"] == "_xsrf=x"
        assert headers["sec-websocket-protocol"] == "a, b"
        assert "origin" not in headers
        sent = [f"text {i}" if i % 3 else f"binary {i}".encode() for i in range(300)]
        for message in sent:
            ws.send(message)
        received = [ws.recv(timeout=10) for _ in sent]
        assert received == sent  # same order, text stays str and binary stays bytes


def test_an_upstream_close_code_reaches_the_browser(live_asgi, world, ws_notebook):
    with open_echo(live_asgi, world) as ws:
        ws.send("close:4321:kernel gone")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4321
    assert closed.value.rcvd.reason == "kernel gone"


def test_a_browser_close_code_reaches_the_upstream(live_asgi, world, ws_notebook, echo_ws):
    echo_ws.drain()
    with open_echo(live_asgi, world) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.close(code=4001)
    assert echo_ws.closes.get(timeout=10) == 4001


def test_a_socket_idles_past_the_layers_read_timeout(live_asgi, world, ws_notebook):
    with open_echo(live_asgi, world) as ws:
        time.sleep(6)  # past the layer's 5 s read timeout (a busy machine only makes the pause longer)
        ws.send(b"\x00after the pause")
        assert ws.recv(timeout=10) == b"\x00after the pause"
