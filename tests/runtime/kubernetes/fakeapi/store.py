"""The fake API server's state: objects of any group/plural, one resourceVersion counter, the watch history,
label and field selectors, ownership-based garbage collection and pod logs.

Everything sits behind one lock; `cond` wakes watchers and log followers whenever something changes.
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Key = tuple[str, str]  # (group, plural); "" is the core group
CLUSTER_SCOPED = {("", "nodes"), ("", "namespaces")}
# What a list is called when it is empty (otherwise the kind comes from its items).
KINDS = {("", "pods"): "Pod", ("", "events"): "Event", ("", "nodes"): "Node", ("", "secrets"): "Secret"}
# The API server's default propagation: batch/v1 Jobs still orphan their pods unless asked otherwise.
ORPHAN_BY_DEFAULT = {("batch", "jobs")}


class ApiError(Exception):
    """An answer with a Status body (what the real API server sends for every failure)."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(ns: int) -> str:
    """Go's RFC3339Nano, as the kubelet prefixes log lines: trailing zeros of the fraction are dropped."""
    seconds, nanos = divmod(ns, 10**9)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"


def parse_time_ns(value: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time with any number of fraction digits."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", value.strip())
    if not match:
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    base, fraction, zone = match.groups()
    moment = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return int(moment.timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0"))


# --- Selectors ---------------------------------------------------------------------------------------

_REQ = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(==|=|!=)\s*([\w./-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas that are not inside "in (a, b)" parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A label selector (=, ==, !=, in, notin, exists, !exists); ApiError 400 for a malformed one."""
    checks: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_selector(selector or ""):
        match = _REQ.match(part)
        if not match:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
        negate, key, op, value, set_op, values = match.groups()
        if op in ("=", "=="):
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif set_op:
            options = {v.strip() for v in values.split(",") if v.strip()}
            if set_op == "in":
                checks.append(lambda labels, k=key, o=options: labels.get(k) in o)
            else:
                checks.append(lambda labels, k=key, o=options: labels.get(k) not in o)
        elif negate:
            checks.append(lambda labels, k=key: k not in labels)
        else:
            checks.append(lambda labels, k=key: k in labels)
    return lambda labels: all(check(labels or {}) for check in checks)


def field_matcher(selector: str) -> Callable[[dict], bool]:
    """A field selector over dotted paths (metadata.name, involvedObject.name, spec.nodeName, status.phase)."""
    checks: list[Callable[[dict], bool]] = []
    for part in _split_selector(selector or ""):
        match = re.match(r"^\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        path, op, value = match.groups()
        if op == "!=":
            checks.append(lambda obj, p=path, v=value: _dig(obj, p) != v)
        else:
            checks.append(lambda obj, p=path, v=value: _dig(obj, p) == v)
    return lambda obj: all(check(obj) for check in checks)


def _dig(obj: dict, path: str) -> str:
    value: Any = obj
    for piece in path.split("."):
        value = value.get(piece) if isinstance(value, dict) else None
    return "" if value is None else str(value)


@dataclass
class Change:
    rv: int
    key: Key
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict


class Store:
    """Objects by (group, plural) and (namespace, name), with a bounded history of changes for watches."""

    def __init__(self, history: int = 2000) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 100
        self.objects: dict[Key, dict[tuple[str, str], dict]] = {}
        self.history: deque[Change] = deque(maxlen=history)
        # A watch from a version older than this cannot be served (its changes left the history): 410 Gone.
        self.compacted_rv = self.rv
        self.logs: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._last_log_ns = 0
        self.on_create: list[Callable[[Key, dict], None]] = []

    # --- reading -------------------------------------------------------------------------------------

    def get(self, key: Key, namespace: str, name: str) -> dict:
        with self.lock:
            obj = self.objects.get(key, {}).get((namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{_resource(key)} "{name}" not found', _details(key, name))
            return copy.deepcopy(obj)

    def find(self, key: Key, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.get(key, {}).get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, key: Key, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict], str]:
        labels_ok, fields_ok = label_matcher(label_selector), field_matcher(field_selector)
        with self.lock:
            items = [
                copy.deepcopy(obj)
                for (ns, _name), obj in sorted(self.objects.get(key, {}).items())
                if (namespace is None or ns == namespace)
                and labels_ok(obj["metadata"].get("labels") or {})
                and fields_ok(obj)
            ]
            return items, str(self.rv)

    def kind_of(self, key: Key) -> str:
        with self.lock:
            for obj in self.objects.get(key, {}).values():
                return obj.get("kind", "")
        return KINDS.get(key, "")

    # --- writing -------------------------------------------------------------------------------------

    def create(self, key: Key, namespace: str, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
            meta["name"] = name
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        if key not in CLUSTER_SCOPED:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match the namespace on the URL")
            meta["namespace"] = namespace
        else:
            namespace = ""
        with self.lock:
            bucket = self.objects.setdefault(key, {})
            if (namespace, name) in bucket:
                raise ApiError(409, "AlreadyExists", f'{_resource(key)} "{name}" already exists', _details(key, name))
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
            meta.setdefault("labels", {})
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            bucket[(namespace, name)] = obj
            self._record(key, "ADDED", obj)
            for hook in list(self.on_create):
                hook(key, copy.deepcopy(obj))
            return copy.deepcopy(obj)

    def replace(self, key: Key, namespace: str, name: str, obj: dict, *, status_only: bool = False) -> dict:
        with self.lock:
            current = self.get(key, namespace, name)
            if status_only:
                current["status"] = copy.deepcopy(obj.get("status") or {})
                new = current
            else:
                new = copy.deepcopy(obj)
                new["metadata"] = {**current["metadata"], **new.get("metadata", {})}
                new["status"] = current.get("status", {})
            return self._save(key, namespace, name, new)

    def patch(self, key: Key, namespace: str, name: str, patch: dict, *, status_only: bool = False) -> dict:
        """A JSON merge patch (RFC 7386)."""
        with self.lock:
            current = self.get(key, namespace, name)
            if status_only:
                patch = {"status": patch.get("status") or {}}
            return self._save(key, namespace, name, _merge(current, patch))

    def modify(self, key: Key, namespace: str, name: str, change: Callable[[dict], None]) -> dict:
        """What controllers do: change an object in place (one MODIFIED event)."""
        with self.lock:
            current = self.get(key, namespace, name)
            change(current)
            return self._save(key, namespace, name, current)

    def delete(self, key: Key, namespace: str, name: str, propagation: str | None = None) -> dict:
        with self.lock:
            obj = self.get(key, namespace, name)
            policy = propagation or ("Orphan" if key in ORPHAN_BY_DEFAULT else "Background")
            if policy == "Foreground":
                # The owner is marked first (deletionTimestamp + finalizer), its dependents go, then the owner.
                obj["metadata"]["deletionTimestamp"] = now_iso()
                obj["metadata"]["finalizers"] = ["foregroundDeletion"]
                obj = self._save(key, namespace, name, obj)
                self._delete_dependents(obj["metadata"]["uid"])
            self._remove(key, namespace, name)
            if policy == "Background":
                self._delete_dependents(obj["metadata"]["uid"])
            return obj

    def _delete_dependents(self, owner_uid: str) -> None:
        for key, bucket in list(self.objects.items()):
            for (ns, name), obj in list(bucket.items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in owners):
                    self._delete_dependents(obj["metadata"]["uid"])
                    self._remove(key, ns, name)

    def _remove(self, key: Key, namespace: str, name: str) -> None:
        obj = self.objects.get(key, {}).pop((namespace, name), None)
        if obj is None:
            return
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if key == ("", "pods"):
            self.logs.pop((namespace, name), None)
        self._record(key, "DELETED", obj)

    def _save(self, key: Key, namespace: str, name: str, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[key][(namespace, name)] = obj
        self._record(key, "MODIFIED", obj)
        return copy.deepcopy(obj)

    def _record(self, key: Key, kind: str, obj: dict) -> None:
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(Change(self.rv, key, kind, copy.deepcopy(obj)))
        self.cond.notify_all()

    def compact(self) -> None:
        """Forget the history (etcd compaction): a watch from any version before now answers 410 Gone."""
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv

    def changes_after(self, rv: int) -> list[Change]:
        """Changes newer than `rv`; ApiError 410 when they are no longer all known."""
        with self.lock:
            if rv < self.compacted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted_rv})")
            return [change for change in self.history if change.rv > rv]

    # --- logs ----------------------------------------------------------------------------------------

    def append_log(self, namespace: str, pod: str, lines: list[str], *, same_time: bool = False) -> None:
        """Lines a pod printed, each stamped with a strictly increasing time as the kubelet stamps them (or all
        with one time, `same_time`: what a coarse clock gives a burst of lines)."""
        with self.lock:
            entries = self.logs.setdefault((namespace, pod), [])
            stamp = 0
            for line in lines:
                if not (same_time and stamp):
                    stamp = max(time.time_ns(), self._last_log_ns + 1)
                    self._last_log_ns = stamp
                entries.append((stamp, line))
            self.cond.notify_all()


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _resource(key: Key) -> str:
    group, plural = key
    return f"{plural}.{group}" if group else plural


def _details(key: Key, name: str) -> dict:
    return {"name": name, "group": key[0], "kind": key[1]}
