"""The portal's ASGI application served by uvicorn on a thread of this process, on a free loopback port
(tests' live server, `demo --run` when no web server runs)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from django.conf import settings
from django.utils.module_loading import import_string


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_in_thread(port: int | None = None, timeout: float = 30) -> tuple[uvicorn.Server, int, threading.Thread]:
    """Start serving the portal's ASGI application on 127.0.0.1 and return (server, port, thread) once it accepts
    connections; stop it with `server.should_exit = True` (and join the thread to wait for the end)."""
    # Found through the setting that names it (as Channels' runserver does): the helpers import nothing above them.
    application = import_string(settings.ASGI_APPLICATION)
    port = port or free_port()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="portal-web", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return server, port, thread
