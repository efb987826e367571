"""The official `kubernetes` client for a `Cluster` row, with retries, as generic REST calls on any kind.

- `client_for(cluster)`: a `KubeClient` built from the row's (decrypted) kubeconfig and context, or from the
  pod's service account (`in_cluster`); cached per cluster and rebuilt when the kubeconfig, context or mode
  changes (the cache key includes a digest of them).
- Every call goes through `ApiClient.call_api` with paths built from a `Resource` (group/version/plural), so
  one code path serves batch/v1 Jobs, Kubeflow and Volcano CRDs and core objects alike, and no discovery
  round trip is needed. Bodies and answers are plain dicts.
- every call goes through `retry.with_retries` (backoff with jitter on 429/5xx/connection errors, never on
  other 4xx, bounded); urllib3's own retries are switched off so that this is the only retry policy.
- Streams (watch, followed logs) are opened with retries too; what breaks mid-stream surfaces as
  `KubeUnavailable`, for the caller to resume (from a resourceVersion, or a log time).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import yaml
from kubernetes import client as k8s
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import load_incluster_config
from kubernetes.config.kube_config import KubeConfigLoader
from kubernetes.watch.watch import iter_resp_lines

from apps.runtime.kubernetes.manifests import Resource
from apps.runtime.kubernetes.retry import (
    CONNECTION_ERRORS,
    KubeError,
    KubeUnavailable,
    RetryPolicy,
    setting,
    with_retries,
)

__all__ = [
    "EVENT",
    "NODE",
    "POD",
    "SECRET",
    "KubeClient",
    "KubeError",
    "KubeUnavailable",
    "RetryPolicy",
    "client_for",
    "configuration_for",
    "forget_clients",
    "path_of",
    "setting",
    "with_retries",
]

POD = Resource("v1", "Pod", "pods")
EVENT = Resource("v1", "Event", "events")
NODE = Resource("v1", "Node", "nodes", namespaced=False)
SECRET = Resource("v1", "Secret", "secrets")


def path_of(resource: Resource, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    """/api/v1/namespaces/ns/pods/name/log, /apis/batch/v1/namespaces/ns/jobs, /api/v1/nodes …"""
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    if resource.namespaced and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{resource.plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    if sub:
        base += f"/{sub}"
    return base


class KubeClient:
    """Generic REST calls on one cluster (thread-safe: urllib3's pool is)."""

    def __init__(self, api: k8s.ApiClient, name: str = "", policy: RetryPolicy | None = None) -> None:
        self.api = api
        self.name = name or api.configuration.host
        self.policy = policy or RetryPolicy.from_settings()
        self.timeout = (5.0, setting("REQUEST_TIMEOUT", 30.0))
        self.sleep: Callable[[float], None] = time.sleep  # between attempts (tests record it)

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | tuple[float, float] | None = None,
        what: str = "",
    ) -> Any:
        def once() -> Any:
            return self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=not stream,
                _request_timeout=timeout or self.timeout,
            )

        return with_retries(once, f"{what or method + ' ' + path} on {self.name}", self.policy, self.sleep)

    # --- objects -------------------------------------------------------------------------------------

    def create(self, resource: Resource, namespace: str, obj: dict) -> dict:
        return self._call("POST", path_of(resource, namespace), body=obj, what=f"creating {resource.kind} {_name(obj)}")

    def get(self, resource: Resource, namespace: str, name: str) -> dict:
        return self._call("GET", path_of(resource, namespace, name), what=f"reading {resource.kind} {name}")

    def find(self, resource: Resource, namespace: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self.get(resource, namespace, name)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict], str]:
        """(items, the list's resourceVersion: where a watch resumes from)."""
        query = _selectors(label_selector, field_selector)
        answer = self._call("GET", path_of(resource, namespace), query=query, what=f"listing {resource.plural}")
        return answer.get("items") or [], (answer.get("metadata") or {}).get("resourceVersion", "")

    def replace(self, resource: Resource, namespace: str, name: str, obj: dict) -> dict:
        return self._call("PUT", path_of(resource, namespace, name), body=obj, what=f"replacing {resource.kind} {name}")

    def patch(self, resource: Resource, namespace: str, name: str, patch: dict, *, status: bool = False) -> dict:
        """A JSON merge patch (of the status subresource when `status`)."""
        return self._call(
            "PATCH",
            path_of(resource, namespace, name, "status" if status else ""),
            body=patch,
            content_type="application/merge-patch+json",
            what=f"patching {resource.kind} {name}",
        )

    def delete(self, resource: Resource, namespace: str, name: str, propagation: str = "Foreground") -> bool:
        """Delete (Foreground: dependents such as pods go first). False when it was already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            self._call("DELETE", path_of(resource, namespace, name), body=body, what=f"deleting {resource.kind} {name}")
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def version(self) -> dict:
        return self._call("GET", "/version", what="reading the version")

    # --- streams -------------------------------------------------------------------------------------

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str = "",
        timeout_seconds: int = 300,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict]:
        """Events ({"type", "object"}) after `resource_version`, until the server ends the watch (after
        `timeout_seconds`). KubeError with status 410 when the version is too old (relist then);
        KubeUnavailable when the connection breaks (watch again from the last version seen).
        `opened(response)` is called with the open stream, so that another thread can `shutdown()` it."""
        query = [("watch", "true"), ("resourceVersion", resource_version), ("timeoutSeconds", timeout_seconds)]
        query += [("allowWatchBookmarks", "true"), *_selectors(label_selector, "")]
        what = f"watching {resource.plural}"
        # A silent connection is a dead one: the server ends a watch after timeout_seconds at the latest.
        response = self._call(
            "GET",
            path_of(resource, namespace),
            query=query,
            stream=True,
            timeout=(5.0, timeout_seconds + 15),
            what=what,
        )
        if opened is not None:
            opened(response)
        try:
            for line in _lines(response, what, self.name):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise KubeUnavailable(f"{what} on {self.name}: a broken event: {line[:200]!r}") from None
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = status.get("code")
                    raise KubeError(
                        f"{what} on {self.name}: {code} {status.get('reason', '')}: {status.get('message', '')}",
                        status=code,
                        reason=status.get("reason", ""),
                        body=status,
                    )
                yield event
        finally:
            _close(response)

    def pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str = "",
        since_time: str = "",
        follow: bool = True,
        idle_timeout: float = 300,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[list[str]]:
        """A pod's log from `since_time` on, followed until the container ends: batches of lines (what
        arrived together), each line prefixed with the kubelet's RFC 3339 timestamp. KubeUnavailable when
        the connection breaks or stays silent for `idle_timeout` s (resume with since_time)."""
        query: list[tuple[str, Any]] = [("timestamps", "true"), ("follow", "true" if follow else "false")]
        if container:
            query.append(("container", container))
        if since_time:
            query.append(("sinceTime", since_time))
        what = f"reading the log of pod {pod}"
        response = self._call(
            "GET", path_of(POD, namespace, pod, "log"), query=query, stream=True, timeout=(5.0, idle_timeout), what=what
        )
        if opened is not None:
            opened(response)
        try:
            yield from _batches(response, what, self.name)
        finally:
            _close(response)


def _batches(response: Any, what: str, cluster: str) -> Iterator[list[str]]:
    """The complete lines of each piece of a streamed answer (a last line without a newline comes at the
    end); a connection that breaks or times out becomes KubeUnavailable (the partial line is dropped: the
    caller resumes from the last complete line)."""
    tail = b""
    try:
        for piece in response.stream(amt=None, decode_content=False):
            *lines, tail = (tail + piece).split(b"\n")
            if lines:
                yield [line.decode("utf-8", errors="replace").rstrip("\r") for line in lines]
    except CONNECTION_ERRORS as exc:
        response.close()
        raise KubeUnavailable(f"{what} on {cluster}: the connection broke: {exc}") from None
    if tail:
        yield [tail.decode("utf-8", errors="replace").rstrip("\r")]


def _lines(response: Any, what: str, cluster: str) -> Iterator[str]:
    """The lines of a streamed answer; a connection that breaks (or times out) becomes KubeUnavailable."""
    try:
        yield from iter_resp_lines(response)
    except CONNECTION_ERRORS as exc:
        response.close()
        raise KubeUnavailable(f"{what} on {cluster}: the connection broke: {exc}") from None


def _close(response: Any) -> None:
    """Close a stream's connection (never back into the pool with unread bytes) and free its slot."""
    response.close()
    response.release_conn()


def _selectors(label_selector: str, field_selector: str) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "?")


# --- one client per cluster ----------------------------------------------------------------------------

_clients: dict[int, tuple[str, KubeClient]] = {}
_clients_lock = threading.Lock()


def _fingerprint(cluster: Any) -> str:
    material = json.dumps([cluster.in_cluster, cluster.context, cluster.kubeconfig or ""])
    return hashlib.sha256(material.encode()).hexdigest()


def configuration_for(cluster: Any) -> k8s.Configuration:
    """The client configuration of a cluster: its kubeconfig (never written to disk by us; the client library
    writes inline certificate data to temporary files, as it must for urllib3) or the in-cluster account."""
    configuration = k8s.Configuration()
    try:
        if cluster.in_cluster:
            load_incluster_config(client_configuration=configuration)
        else:
            try:
                document = yaml.safe_load(cluster.kubeconfig or "")
            except yaml.YAMLError as exc:
                raise KubeError(f"cluster {cluster.name}: the kubeconfig is not valid YAML: {exc}") from None
            if not isinstance(document, dict):
                raise KubeError(f"cluster {cluster.name}: no kubeconfig")
            loader = KubeConfigLoader(config_dict=document, active_context=cluster.context or None)
            loader.load_and_set(configuration)
    except ConfigException as exc:
        raise KubeError(f"cluster {cluster.name}: {exc}") from None
    # Ours is the only retry policy (urllib3 would otherwise retry on its own, and hide the failures).
    configuration.retries = False
    return configuration


def client_for(cluster: Any) -> KubeClient:
    """The cached client of a `Cluster` row (rebuilt when its kubeconfig, context or mode changed)."""
    fingerprint = _fingerprint(cluster)
    with _clients_lock:
        cached = _clients.get(cluster.pk)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
    client = KubeClient(k8s.ApiClient(configuration_for(cluster)), name=cluster.name)
    with _clients_lock:
        _clients[cluster.pk] = (fingerprint, client)
    return client


def forget_clients() -> None:
    """Drop every cached client (tests; a controller that restarts its loop)."""
    with _clients_lock:
        _clients.clear()
