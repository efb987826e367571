"""A watched collection: list, then watch from the list's resourceVersion, kept in memory.

One thread per (cluster, namespace, resource, label selector). It
- lists (the cache becomes exactly what the list says) and watches from the list's resourceVersion;
- after a dropped connection watches again from the last version it saw (no event is lost or replayed);
- relists when the server answers 410 Gone (the version left the server's history);
- relists every `resync` seconds anyway, so that a missed event can never strand a workload.
Every change calls `on_change()` (the controller's wake-up); the controller reads the cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from apps.runtime.kubernetes.client import KubeClient, KubeError, KubeUnavailable
from apps.runtime.kubernetes.manifests import Resource

log = logging.getLogger("portal.kube")

MAX_WATCH_SECONDS = 300
MAX_BACKOFF = 10.0


class Watcher:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        resync: float = 60.0,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.resync = resync
        self.on_change = on_change
        self.synced = threading.Event()  # set after the first successful list
        self.stopping = threading.Event()
        self.lists = 0  # how many times it listed (the first, after 410 Gone, and each resync)
        self.resource_version = ""
        self.error = ""
        self._objects: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._response: Any = None
        where = f"{namespace}/" if namespace else ""
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{client.name}-{where}{resource.plural}", daemon=True
        )

    # --- the cache -----------------------------------------------------------------------------------

    def get(self, name: str) -> dict | None:
        with self._lock:
            return self._objects.get(name)

    def items(self) -> list[dict]:
        with self._lock:
            return list(self._objects.values())

    # --- the thread ----------------------------------------------------------------------------------

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        response = self._response
        if response is not None:  # unblock a read that may wait for minutes
            try:
                response.shutdown()
            except Exception:  # shutting down a socket another thread reads from: best effort
                log.debug("closing a watch of %s failed", self.resource.plural, exc_info=True)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        listed_at = 0.0
        while not self.stopping.is_set():
            try:
                if not self.resource_version or time.monotonic() - listed_at >= self.resync:
                    self._list()
                    listed_at = time.monotonic()
                window = max(1, min(MAX_WATCH_SECONDS, int(self.resync - (time.monotonic() - listed_at)) + 1))
                for event in self.client.watch(
                    self.resource,
                    self.namespace,
                    self.resource_version,
                    label_selector=self.label_selector,
                    timeout_seconds=window,
                    opened=self._opened,
                ):
                    self._apply(event)
                    if self.stopping.is_set() or time.monotonic() - listed_at >= self.resync:
                        break
                backoff = 0.5
                self.error = ""
            except KubeError as exc:
                if self.stopping.is_set():
                    break
                if exc.gone:
                    log.info("%s: %s; relisting", self.resource.plural, exc)
                    self.resource_version = ""  # the next pass lists again
                    continue
                self.error = str(exc)
                if not isinstance(exc, KubeUnavailable):
                    log.warning("%s", exc)
                # Watch again from the last version seen (a dropped connection loses nothing).
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            except Exception:  # a bug must not end the watch for good: log it, then relist
                log.exception("watching %s failed", self.resource.plural)
                self.resource_version = ""
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
            finally:
                self._response = None

    def _opened(self, response: Any) -> None:
        self._response = response

    def _list(self) -> None:
        items, version = self.client.list(self.resource, self.namespace, label_selector=self.label_selector)
        with self._lock:
            self._objects = {item["metadata"]["name"]: item for item in items}
        self.resource_version = version
        self.lists += 1
        self.synced.set()
        self.on_change()

    def _apply(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        meta = obj.get("metadata") or {}
        if kind == "BOOKMARK":
            self.resource_version = meta.get("resourceVersion") or self.resource_version
            return
        name = meta.get("name")
        if not name:
            return
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(name, None)
            else:
                self._objects[name] = obj
        self.resource_version = meta.get("resourceVersion") or self.resource_version
        self.on_change()
