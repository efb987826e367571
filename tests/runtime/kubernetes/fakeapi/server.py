"""The HTTP side of the fake API server: the Kubernetes REST paths for any group/version/plural.

    /api/v1[/namespaces/{ns}]/{plural}[/{name}[/{status|log}]]
    /apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/status]]
    /version

GET (get, list, `?watch=true` as chunked JSON lines, pod logs), POST (create), PUT and PATCH (merge patch,
also of /status), DELETE (with propagationPolicy in the DeleteOptions body or the query).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.runtime.kubernetes.fakeapi.faults import Fault
from tests.runtime.kubernetes.fakeapi.store import (
    CLUSTER_SCOPED,
    ApiError,
    Key,
    field_matcher,
    label_matcher,
    parse_time_ns,
    rfc3339_nano,
    status_body,
)

if TYPE_CHECKING:
    from tests.runtime.kubernetes.fakeapi import FakeKube

POLL_SECONDS = 0.05  # how often a stream re-checks for shutdown while nothing happens
TERMINAL = ("Succeeded", "Failed")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fake: FakeKube) -> None:
        self.fake = fake
        self.stopping = False
        super().__init__(("127.0.0.1", 0), Handler)


class Dropped(Exception):
    """The connection was cut on purpose (a fault), or the client went away."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like the real API server
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read `fake.requests`
        pass

    # --- entry points --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        self.lose_answer = False
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fake.record(method, url.path, url.query)
        try:
            if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = fake.faults.take(method, url.path, url.query)
            if fault is not None and fault.action in ("status", "drop"):
                self._fault(fault)
                return
            if fault is not None and fault.action == "slow":
                time.sleep(fault.delay)
            if fault is not None and fault.action == "hold":
                while not fault.gate.wait(POLL_SECONDS) and not self.server.stopping:
                    pass
            body = json.loads(raw) if raw else {}
            # "lose": the request takes effect, but its answer never reaches the client.
            self.lose_answer = fault is not None and fault.action == "lose"
            self._route(method, url.path, body, fault)
        except ApiError as exc:
            try:
                self._send_json(exc.code, exc.status())
            except (BrokenPipeError, ConnectionResetError):  # the client is gone (a killed controller)
                self.close_connection = True
        except Dropped:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _fault(self, fault: Fault) -> None:
        if fault.action == "drop":
            self._drop()
            return
        headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
        self._send_json(fault.status, status_body(fault.status, fault.reason, fault.message), headers)

    # --- routing -------------------------------------------------------------------------------------

    def _route(self, method: str, path: str, body: dict, fault: Fault | None) -> None:
        fake = self.server.fake
        if path.rstrip("/") == "/version":
            self._send_json(200, fake.version_info())
            return
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        key: Key = (group, rest[0])
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if key in CLUSTER_SCOPED:
            namespace = ""
        store = fake.store

        if method == "GET" and sub == "log":
            self._log(namespace or "", name, fault)
        elif method == "GET" and name:
            self._send_json(200, store.get(key, namespace or "", name))
        elif method == "GET" and _truthy(self.query.get("watch")):
            self._watch(key, namespace, fault)
        elif method == "GET":
            items, rv = store.list(
                key, namespace, self.query.get("labelSelector", ""), self.query.get("fieldSelector", "")
            )
            kind = store.kind_of(key) or "List"
            self._send_json(
                200,
                {
                    "kind": f"{kind}List",
                    "apiVersion": _api_version(group, version),
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                },
            )
        elif method == "POST" and not name:
            if namespace is None and key not in CLUSTER_SCOPED:
                raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
            self._send_json(201, store.create(key, namespace or "", body))
        elif method == "PUT" and name:
            self._send_json(200, store.replace(key, namespace or "", name, body, status_only=sub == "status"))
        elif method == "PATCH" and name:
            self._send_json(200, store.patch(key, namespace or "", name, body, status_only=sub == "status"))
        elif method == "DELETE" and name:
            policy = body.get("propagationPolicy") or self.query.get("propagationPolicy")
            self._send_json(200, store.delete(key, namespace or "", name, policy))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    # --- watch ---------------------------------------------------------------------------------------

    def _watch(self, key: Key, namespace: str | None, fault: Fault | None) -> None:
        store = self.server.fake.store
        labels_ok = label_matcher(self.query.get("labelSelector", ""))
        fields_ok = field_matcher(self.query.get("fieldSelector", ""))
        timeout = float(self.query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        since = self.query.get("resourceVersion", "")
        self._start_stream("application/json")
        if fault is not None and fault.action == "gone":
            self._send_event({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version")})
            self._end_stream()
            return
        if fault is not None and fault.action == "mute":  # an open watch that never says anything
            while not self.server.stopping and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            self._end_stream()
            return

        def wanted(change_key: Key, obj: dict) -> bool:
            meta = obj.get("metadata", {})
            return (
                change_key == key
                and (namespace is None or meta.get("namespace", "") == namespace)
                and labels_ok(meta.get("labels") or {})
                and fields_ok(obj)
            )

        sent = 0
        with store.lock:
            if since in ("", "0"):
                # No version: the current objects as ADDED, then what changes (the API server's semantics).
                items, rv = store.list(key, namespace)
                initial = [{"type": "ADDED", "object": obj} for obj in items if wanted(key, obj)]
                cursor = int(rv)
            else:
                try:
                    cursor = int(since)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {since!r}") from None
                try:
                    pending = store.changes_after(cursor)
                except ApiError as exc:  # too old: the real server answers 200 and then this ERROR event
                    initial = [{"type": "ERROR", "object": exc.status()}]
                else:
                    initial = [{"type": c.type, "object": c.obj} for c in pending if wanted(c.key, c.obj)]
                    cursor = max([cursor, *(c.rv for c in pending)])
        self._cut_if_done(fault, sent)
        for event in initial:
            self._send_event(event)
            sent = self._cut_if_done(fault, sent + 1)
            if event["type"] == "ERROR":
                self._end_stream()
                return
        while not self.server.stopping and time.monotonic() < deadline:
            with store.lock:
                try:
                    changes = store.changes_after(cursor)
                except ApiError as exc:  # compacted while we were watching
                    changes, gone = [], exc
                else:
                    gone = None
                if not changes and gone is None:
                    store.cond.wait(min(POLL_SECONDS * 4, max(deadline - time.monotonic(), 0)))
                    continue
            if gone is not None:
                self._send_event({"type": "ERROR", "object": gone.status()})
                break
            for change in changes:
                cursor = change.rv
                if wanted(change.key, change.obj):
                    self._send_event({"type": change.type, "object": change.obj})
                    sent = self._cut_if_done(fault, sent + 1)
        self._end_stream()

    def _cut_if_done(self, fault: Fault | None, sent: int) -> int:
        """After `sent` items: cut the connection if a "cut" fault allows no more."""
        if fault is not None and fault.action == "cut" and sent >= fault.after:
            self._drop()
            raise Dropped
        return sent

    def _send_event(self, event: dict) -> None:
        self._chunk(json.dumps(event).encode() + b"\n")

    # --- pod logs ------------------------------------------------------------------------------------

    def _log(self, namespace: str, name: str, fault: Fault | None) -> None:
        store = self.server.fake.store
        pod = store.get(("", "pods"), namespace, name)
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = self.query.get("container") or ""
        if not container and len(containers) > 1:
            raise ApiError(
                400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {containers}"
            )
        if container and container not in containers:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        container = container or (containers[0] if containers else "")
        with store.lock:
            started = _container_started(pod)
            if not started and not store.logs.get((namespace, name)):
                waiting = _waiting_reason(pod) or "ContainerCreating"
                raise ApiError(
                    400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}'
                )
        follow = _truthy(self.query.get("follow"))
        stamps = _truthy(self.query.get("timestamps"))
        since_ns = parse_time_ns(self.query["sinceTime"]) if self.query.get("sinceTime") else 0
        if self.query.get("sinceSeconds"):
            since_ns = max(since_ns, time.time_ns() - int(self.query["sinceSeconds"]) * 10**9)
        position = 0
        sent = 0
        self._start_stream("text/plain")
        self._cut_if_done(fault, sent)
        while not self.server.stopping:
            with store.lock:
                entries = store.logs.get((namespace, name), [])
                batch = entries[position:]
                position = len(entries)
                current = store.find(("", "pods"), namespace, name)
                ended = current is None or current.get("status", {}).get("phase") in TERMINAL
                if not batch and follow and not ended:
                    store.cond.wait(POLL_SECONDS * 4)
                    continue
            for stamp, text in batch:
                if stamp < since_ns:
                    continue
                line = f"{rfc3339_nano(stamp)} {text}" if stamps else text
                self._chunk(line.encode() + b"\n")
                sent = self._cut_if_done(fault, sent + 1)
            if not follow or (ended and not batch):
                break
        self._end_stream()

    # --- plumbing ------------------------------------------------------------------------------------

    def _send_json(self, code: int, body: dict, headers: dict[str, str] | None = None) -> None:
        if self.lose_answer:
            self._drop()
            return
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Cut the TCP connection as a crashing proxy would: no more bytes, no chunk terminator."""
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def _truthy(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (the typed client sends "True")."""
    return (value or "").lower() in ("1", "t", "true")


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _container_started(pod: dict) -> bool:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def _waiting_reason(pod: dict) -> str:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason", "")
    return ""
