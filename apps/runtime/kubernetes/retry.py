"""Errors of calls to a cluster, and the one retry policy: exponential backoff with jitter on 429 (honouring
Retry-After), 5xx and connection errors (urllib3 protocol/timeout errors, resets, refusals); never on other
4xx; a bounded number of attempts, then a clear error."""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import urllib3
from django.conf import settings
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("portal.kube")

T = TypeVar("T")


def setting(name: str, default: float) -> float:
    """PORTAL_KUBE_<NAME> from the settings, else from the environment, else `default`."""
    key = f"PORTAL_KUBE_{name}"
    value = getattr(settings, key, None)
    if value is None:
        value = os.environ.get(key)
    return float(value) if value not in (None, "") else default


class KubeError(Exception):
    """A call to the cluster failed. `status` is the HTTP status (None when the server was not reached),
    `reason` the Status reason (AlreadyExists, NotFound, Invalid, Forbidden, Expired …), `retry_after` the seconds
    a 429's Retry-After asked for (what a task that tries again later waits at least)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        body: dict | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class KubeUnavailable(KubeError):
    """The cluster could not be reached, or a connection broke (also: retries on 429/5xx ran out)."""


# Connection-level failures worth another attempt: urllib3's (ProtocolError, timeouts, NewConnectionError),
# http.client's (RemoteDisconnected, IncompleteRead) and the socket's own (resets, refusals).
CONNECTION_ERRORS = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base: float = 0.2  # seconds before the second attempt; doubles each time
    cap: float = 10.0  # no single wait is longer (a Retry-After longer than `max_retry_after` is cut to it)
    max_retry_after: float = 30.0

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        """PORTAL_KUBE_RETRY_ATTEMPTS and PORTAL_KUBE_RETRY_BASE (settings or environment) override the defaults."""
        return cls(attempts=int(setting("RETRY_ATTEMPTS", cls.attempts)), base=setting("RETRY_BASE", cls.base))

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based): half fixed, half random (so that
        many clients that failed together do not come back together)."""
        backoff = min(self.cap, self.base * 2 ** (attempt - 1))
        wait = backoff / 2 + random.uniform(0, backoff / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


def _status_of(exc: ApiException) -> tuple[str, str, dict]:
    """(reason, message, body) of an ApiException's Status body."""
    raw = exc.body
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return body.get("reason") or str(exc.reason or ""), body.get("message") or str(raw or exc.reason or ""), body


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from the API server; the backoff applies


def with_retries(
    call: Callable[[], T], what: str, policy: RetryPolicy | None = None, sleep: Callable[[float], None] = time.sleep
) -> T:
    """`call()` until it succeeds, retrying what may pass (429, 5xx, connection errors) with backoff.
    Raises KubeError (KubeUnavailable for what never got through)."""
    policy = policy or RetryPolicy.from_settings()
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except ApiException as exc:
            reason, message, body = _status_of(exc)
            status = exc.status or None
            retryable = status == 429 or (status is not None and status >= 500)
            if not retryable:
                raise KubeError(
                    f"{what}: {status} {reason}: {message}", status=status, reason=reason, body=body
                ) from None
            retry_after = _retry_after(exc) if status == 429 else None
            if attempt == policy.attempts:
                raise KubeUnavailable(
                    f"{what}: {status} {reason}: {message} (gave up after {attempt} attempts)",
                    status=status,
                    reason=reason,
                    body=body,
                    retry_after=retry_after,
                ) from None
            wait = policy.delay(attempt, retry_after)
            log.info("%s: %s %s, attempt %d, retrying in %.2f s", what, status, reason, attempt, wait)
        except CONNECTION_ERRORS as exc:
            if attempt == policy.attempts:
                raise KubeUnavailable(
                    f"{what}: cannot reach the cluster: {exc} (gave up after {attempt} attempts)"
                ) from None
            wait = policy.delay(attempt)
            log.info("%s: %s, attempt %d, retrying in %.2f s", what, exc, attempt, wait)
        sleep(wait)
    raise AssertionError("unreachable")  # the loop always returns or raises


def task_countdown(retries: int, retry_after: float | None = None) -> float:
    """Seconds before a Celery task whose cluster could not be reached (KubeUnavailable: its calls' own retries ran
    out) runs again, after `retries` earlier retries: exponential from PORTAL_KUBE_TASK_RETRY_BASE (2 s), capped at
    two minutes, half of it random, and never less than the Retry-After of a 429 (up to ten minutes)."""
    policy = RetryPolicy(base=setting("TASK_RETRY_BASE", 2.0), cap=120.0, max_retry_after=600.0)
    return policy.delay(retries + 1, retry_after)
