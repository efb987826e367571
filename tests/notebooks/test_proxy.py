"""The notebook proxy against a real JupyterLab, through the real ASGI server (uvicorn) and the portal's login.

alice owns project A and the notebook; bob is an editor of A (a member, not the notebook's owner); charlie is an
outsider. Kernel messages use Jupyter's v1 websocket protocol (binary frames), as JupyterLab 4 does.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from datetime import UTC, datetime

import httpx
import psutil
import pytest
from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from apps.audit.models import AuditEntry
from apps.notebooks.models import Notebook
from portal.lib.serve import free_port
from tests.notebooks.jupyter import JupyterServer, jupyter, running_notebook  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

KERNEL_PROTOCOL = "v1.kernel.websocket.jupyter.org"


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def browser(live, user=None, **headers: str) -> httpx.Client:
    """An HTTP client as a page of the portal would be: the user's session cookie, the portal as Origin."""
    base = {"Origin": live.url}
    if user is not None:
        base["Cookie"] = session_cookie(user)
    return httpx.Client(base_url=live.url, headers={**base, **headers}, timeout=30)


def open_socket(live, path: str, user=None, *, origin: str | None = None, protocols=(KERNEL_PROTOCOL,)):
    headers = {"Origin": origin or live.url}
    if user is not None:
        headers["Cookie"] = session_cookie(user)
    return connect(
        f"{live.ws_url}{path}",
        additional_headers=headers,
        subprotocols=list(protocols) or None,
        open_timeout=20,
        max_size=None,
    )


def refused_status(live, path: str, user=None, **kwargs) -> int:
    with pytest.raises(InvalidStatus) as refused:
        open_socket(live, path, user, **kwargs).close()
    return refused.value.response.status_code


@pytest.fixture
def notebook(world, jupyter: JupyterServer) -> Notebook:  # noqa: F811
    return running_notebook(jupyter, world.project_a, world.alice)


@pytest.fixture
def alice(live_asgi, world, notebook):
    with browser(live_asgi, world.alice) as client:
        yield client


# --- Jupyter's kernel messages over the v1 websocket protocol ------------------------------------------------


def pack(channel: str, message: dict) -> bytes:
    """A v1 frame: the number of offsets, the offsets (little-endian u64), the channel, then the JSON parts."""
    parts = [json.dumps(message[key]).encode() for key in ("header", "parent_header", "metadata", "content")]
    offsets = [8 * (1 + 1 + len(parts) + 1)]
    offsets.append(offsets[-1] + len(channel.encode()))
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    head = len(offsets).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little") for o in offsets)
    return head + channel.encode() + b"".join(parts)


def unpack(frame: bytes) -> tuple[str, dict]:
    count = int.from_bytes(frame[:8], "little")
    offsets = [int.from_bytes(frame[8 * (i + 1) : 8 * (i + 2)], "little") for i in range(count)]
    channel = frame[offsets[0] : offsets[1]].decode()
    parts = [frame[offsets[i] : offsets[i + 1]] for i in range(1, count - 1)]
    keys = ("header", "parent_header", "metadata", "content")
    return channel, {key: json.loads(part) for key, part in zip(keys, parts, strict=False)}


def execute(ws: ClientConnection, code: str, session: str, timeout: float = 30) -> str:
    """Run `code` in the kernel; the text/plain of its execute_result."""
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": "alice",
        "session": session,
        "version": "5.3",
        "date": datetime.now(UTC).isoformat(),
    }
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
    ws.send(pack("shell", {"header": header, "parent_header": {}, "metadata": {}, "content": content}))
    deadline = time.monotonic() + timeout
    while True:
        frame = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        assert isinstance(frame, bytes), f"v1 frames are binary: {frame!r}"
        channel, message = unpack(frame)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        msg_type = message["header"]["msg_type"]
        if msg_type == "error":
            raise AssertionError(message["content"])
        if channel == "iopub" and msg_type == "execute_result":
            return message["content"]["data"]["text/plain"]


@pytest.fixture
def kernel(alice, notebook):
    """A kernel started through the proxy (a same-origin POST), shut down through it at the end."""
    response = alice.post(f"{notebook.base_path}api/kernels", json={"name": "python3"})
    assert response.status_code == 201, response.text
    kernel_id = response.json()["id"]
    yield kernel_id
    alice.delete(f"{notebook.base_path}api/kernels/{kernel_id}")


def channels_path(notebook: Notebook, kernel_id: str) -> str:
    return f"{notebook.base_path}api/kernels/{kernel_id}/channels?session_id={uuid.uuid4()}"


# --- HTTP --------------------------------------------------------------------------------------------------------


def test_jupyterlab_opens_through_the_proxy_with_its_own_scripts(alice, notebook, jupyter):  # noqa: F811
    page = alice.get(f"{notebook.base_path}lab")

    assert page.status_code == 200, page.text
    assert "<title>JupyterLab</title>" in page.text
    config = json.loads(re.search(r'id="jupyter-config-data" type="application/json">(.*?)</script>', page.text)[1])
    assert config["baseUrl"] == notebook.base_path
    assert config["token"] == ""  # blanked: the page sends no token, the proxy adds the real one
    assert jupyter.token not in page.text
    assert int(page.headers["content-length"]) == len(page.content)  # blanking keeps every byte count
    # The server's policy, not the portal's (which would block JupyterLab's inline scripts); framing: same origin.
    assert page.headers["content-security-policy"].startswith("frame-ancestors 'self'")
    assert page.headers["x-frame-options"] == "SAMEORIGIN"
    assert "access-control-allow-origin" not in page.headers
    xsrf = [c for c in page.headers.get_list("set-cookie") if c.startswith("_xsrf=")]
    assert xsrf, page.headers  # Jupyter's own cookies pass, scoped to the notebook
    assert f"Path={notebook.base_path}" in xsrf[0]

    script = re.search(r'<script defer="defer" src="([^"]+)"', page.text)[1]
    assert script.startswith(f"{notebook.base_path}static/lab/main.")
    bundle = alice.get(script)
    assert bundle.status_code == 200
    assert bundle.headers["content-type"] == "application/javascript"
    assert len(bundle.content) == int(bundle.headers["content-length"]) > 10_000


def test_the_root_redirects_into_the_lab(alice, notebook):
    response = alice.get(notebook.base_path)
    assert response.status_code == 302
    assert response.headers["location"].startswith(f"{notebook.base_path}lab")


def test_files_round_trip_through_the_contents_api_without_audit_entries(alice, notebook, jupyter):  # noqa: F811
    entries = AuditEntry.objects.count()
    url = f"{notebook.base_path}api/contents/hello%20w%C3%B6rld.txt"

    saved = alice.put(url, json={"type": "file", "format": "text", "content": "saved through the proxy\n"})
    assert saved.status_code == 201, saved.text
    assert (jupyter.root / "hello wörld.txt").read_text() == "saved through the proxy\n"

    (jupyter.root / "hello wörld.txt").write_text("changed on disk\n")
    read = alice.get(url, params={"content": "1", "type": "file"})
    assert read.status_code == 200
    assert read.json()["content"] == "changed on disk\n"
    assert read.json()["path"] == "hello wörld.txt"
    assert AuditEntry.objects.count() == entries  # a file save in JupyterLab is not a portal change


def test_a_kernel_adds_1_and_1_over_the_proxied_websocket(live_asgi, world, notebook, kernel):
    with open_socket(live_asgi, channels_path(notebook, kernel), world.alice) as ws:
        assert ws.subprotocol == KERNEL_PROTOCOL  # the server's choice, passed back to the browser
        assert execute(ws, "1+1", session=uuid.uuid4().hex) == "2"


def test_an_idle_kernel_socket_stays_open(live_asgi, world, notebook, kernel):
    """A kernel socket sits idle for minutes while the user reads: nothing may time it out (the Redis layer's
    5 s read timeout closed idle sockets once; this relay uses no layer)."""
    session = uuid.uuid4().hex
    with open_socket(live_asgi, channels_path(notebook, kernel), world.alice) as ws:
        assert execute(ws, "x = 20; x", session) == "20"
        time.sleep(6)  # past the 5 s read timeout that closed them (a busy machine only makes it longer)
        assert execute(ws, "x * 2 + 2", session) == "42"


def test_a_terminal_echoes_through_the_proxy(live_asgi, world, alice, notebook):
    created = alice.post(f"{notebook.base_path}api/terminals")
    assert created.status_code == 200, created.text
    name = created.json()["name"]
    try:
        with open_socket(live_asgi, f"{notebook.base_path}terminals/websocket/{name}", world.alice, protocols=()) as ws:
            ws.send(json.dumps(["stdin", "echo $((6*7))XY\r"]))
            seen = ""
            deadline = time.monotonic() + 20
            while "42XY" not in seen:
                kind, *payload = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                if kind == "stdout":
                    seen += payload[0]
    finally:
        alice.delete(f"{notebook.base_path}api/terminals/{name}")


def test_closing_either_side_closes_the_other(live_asgi, world, alice, notebook, kernel):
    with open_socket(live_asgi, channels_path(notebook, kernel), world.alice):
        assert wait_for(lambda: kernel_connections(alice, notebook, kernel) == 1)
    assert wait_for(lambda: kernel_connections(alice, notebook, kernel) == 0)  # the browser left: so did the relay

    name = alice.post(f"{notebook.base_path}api/terminals").json()["name"]
    with open_socket(live_asgi, f"{notebook.base_path}terminals/websocket/{name}", world.alice, protocols=()) as ws:
        ws.send(json.dumps(["stdin", "exit\r"]))  # the shell ends: the server closes its socket
        assert close_code_of(ws) == 1000


def close_code_of(ws: ClientConnection) -> int | None:
    """Read until the socket closes; the code of the close frame received."""
    try:
        while True:
            ws.recv(timeout=20)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


def kernel_connections(client: httpx.Client, notebook: Notebook, kernel_id: str) -> int:
    return client.get(f"{notebook.base_path}api/kernels/{kernel_id}").json()["connections"]


def wait_for(condition, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_large_download_streams(alice, notebook, jupyter):  # noqa: F811
    size = 256 * 1024 * 1024
    with (jupyter.root / "big.bin").open("wb") as f:
        f.truncate(size)  # sparse: no disk used, still 256 MiB to read
    process, peak, done = psutil.Process(os.getpid()), [0], threading.Event()
    baseline = process.memory_info().rss

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    received, first_byte = 0, None
    started = time.monotonic()
    try:
        with alice.stream("GET", f"{notebook.base_path}files/big.bin") as response:
            assert response.status_code == 200
            assert int(response.headers["content-length"]) == size
            for chunk in response.iter_raw():
                first_byte = first_byte or time.monotonic() - started
                received += len(chunk)
    finally:
        done.set()
        sampler.join()
        (jupyter.root / "big.bin").unlink()
    assert received == size
    # Streamed: this process (which serves the portal) never held more than a small part of it.
    assert peak[0] - baseline < 64 * 1024 * 1024, (peak[0] - baseline) / 2**20


def test_the_token_never_reaches_the_browser(alice, notebook, jupyter):  # noqa: F811
    paths = ["", "lab", "lab/tree", "api/status", "api/me", "api/kernelspecs", "lab/api/settings", "api/nope", "x"]
    for path in paths:
        response = alice.get(f"{notebook.base_path}{path}")
        assert jupyter.token not in response.text, path
        assert not any(jupyter.token in value for value in response.headers.values()), path
    assert alice.get(f"{notebook.base_path}api/me").status_code == 200  # authenticated upstream all the same


# --- Who may open it -----------------------------------------------------------------------------------------

PROBED_PATHS = ["", "lab", "api/contents", "api/kernels", "api/status", "static/lab/style.js", "files/a.txt"]


def test_anonymous_is_sent_to_login(live_asgi, world, notebook):
    with browser(live_asgi) as anonymous:
        for path in ["lab", "api/contents"]:
            response = anonymous.get(f"{notebook.base_path}{path}")
            assert response.status_code == 302
            assert response.headers["location"] == f"/accounts/login/?next={notebook.base_path}{path}"
        assert anonymous.post(f"{notebook.base_path}api/kernels", json={}).status_code == 302
    assert refused_status(live_asgi, f"{notebook.base_path}api/kernels/x/channels") == 403


@pytest.mark.parametrize("who", ["charlie", "bob"])
def test_anyone_but_the_owner_gets_404_everywhere(live_asgi, world, notebook, kernel, who):
    """charlie is an outsider; bob is a member of the project but the notebook is alice's."""
    user = getattr(world, who)
    with browser(live_asgi, user) as client:
        for path in PROBED_PATHS:
            assert client.get(f"{notebook.base_path}{path}").status_code == 404, path
        assert client.post(f"{notebook.base_path}api/kernels", json={"name": "python3"}).status_code == 404
        assert client.delete(f"{notebook.base_path}api/kernels/{kernel}").status_code == 404
        assert client.get("/notebook/987654321/lab").status_code == 404  # the same as one that does not exist
    assert refused_status(live_asgi, channels_path(notebook, kernel), user) == 404
    assert refused_status(live_asgi, f"{notebook.base_path}api/events/subscribe", user, protocols=()) == 404
    assert refused_status(live_asgi, "/notebook/987654321/api/kernels/x/channels", user) == 404


def test_a_member_opens_their_own_notebook_until_they_leave_the_project(live_asgi, world, notebook):
    from apps.projects.models import Membership
    from apps.projects.services import leave_project

    Notebook.objects.filter(pk=notebook.pk).update(owner=world.bob)  # bob's own notebook in project A
    with browser(live_asgi, world.bob) as client:
        assert client.get(f"{notebook.base_path}api/status").status_code == 200
        assert Membership.objects.filter(project=world.project_a, user=world.bob).exists()
        leave_project(world.project_a, world.bob)
        assert client.get(f"{notebook.base_path}api/status").status_code == 404
    with browser(live_asgi, world.alice) as client:  # the project's owner never opens someone else's
        assert client.get(f"{notebook.base_path}api/status").status_code == 404


def test_a_stopped_notebook_is_not_proxied(live_asgi, world, notebook):
    Notebook.objects.filter(pk=notebook.pk).update(status=Notebook.Status.STOPPED)
    page = f"/p/{world.project_a.slug}/notebooks/{notebook.pk}/"
    with browser(live_asgi, world.alice) as client:
        root = client.get(notebook.base_path)
        assert root.status_code == 302
        assert root.headers["location"] == page
        lab = client.get(f"{notebook.base_path}lab")
        assert lab.status_code == 503
        assert "not running" in lab.text
        assert "Stopped" in lab.text
        assert page in lab.text
        assert "script-src" in lab.headers["content-security-policy"]  # the portal's own page and policy
        assert client.post(f"{notebook.base_path}api/kernels", json={}).status_code == 503
    assert refused_status(live_asgi, f"{notebook.base_path}api/kernels/x/channels", world.alice) == 503


def test_a_starting_notebook_page_reloads_itself(live_asgi, world, notebook):
    Notebook.objects.filter(pk=notebook.pk).update(status=Notebook.Status.STARTING)
    with browser(live_asgi, world.alice) as client:
        response = client.get(f"{notebook.base_path}lab")
    assert response.status_code == 503
    assert response.headers["refresh"] == "3"
    assert "Starting" in response.text


def test_an_unreachable_server_answers_502_with_the_reason(live_asgi, world, notebook):
    Notebook.objects.filter(pk=notebook.pk).update(upstream=f"http://127.0.0.1:{free_port()}")
    with browser(live_asgi, world.alice) as client:
        response = client.get(f"{notebook.base_path}lab")
    assert response.status_code == 502
    assert "ConnectError" in response.text
    assert refused_status(live_asgi, f"{notebook.base_path}api/kernels/x/channels", world.alice) == 502


# --- Cross-site requests -------------------------------------------------------------------------------------


def test_a_cross_site_post_is_refused(live_asgi, world, notebook):
    kernels = f"{notebook.base_path}api/kernels"
    with browser(live_asgi, world.alice, Origin="http://evil.example") as client:
        assert client.post(kernels, json={"name": "python3"}).status_code == 403
        assert client.put(f"{notebook.base_path}api/contents/x.txt", json={"type": "file"}).status_code == 403
    with browser(live_asgi, world.alice) as client:
        no_origin = {"Cookie": client.headers["Cookie"]}
        # Neither Origin nor Referer: refused; a same-origin Referer alone is enough.
        assert httpx.post(f"{live_asgi.url}{kernels}", json={}, headers=no_origin).status_code == 403
        referer = {**no_origin, "Referer": f"{live_asgi.url}{notebook.base_path}lab"}
        started = httpx.post(f"{live_asgi.url}{kernels}", json={"name": "python3"}, headers=referer, timeout=30)
        assert started.status_code == 201, started.text
        client.delete(f"{kernels}/{started.json()['id']}")
    assert jupyter_kernel_count(live_asgi, world) == 0  # the refused POSTs started nothing


def jupyter_kernel_count(live, world) -> int:
    with browser(live, world.alice) as client:
        return len(client.get(f"/notebook/{Notebook.objects.get().pk}/api/kernels").json())


def test_a_cross_site_websocket_is_refused(live_asgi, world, notebook, kernel):
    # The same host on another port passes Channels' ALLOWED_HOSTS check; the proxy wants the portal's origin.
    other = f"http://127.0.0.1:{free_port()}"
    assert refused_status(live_asgi, channels_path(notebook, kernel), world.alice, origin=other) == 403
