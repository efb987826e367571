"""What the portal answered, as exceptions: one class per kind of refusal, carrying the server's field messages."""

from __future__ import annotations

from typing import Any


class PortalError(Exception):
    """Base of every error the client raises."""

    exit_code = 1


class TransportError(PortalError):
    """The portal could not be reached (refused, timed out, name not found)."""

    exit_code = 3


class APIError(PortalError):
    """A 4xx or 5xx answer. `errors` holds the server's messages by field (`{"name": ["…"]}`; a message about no
    field is under `detail` or `non_field_errors`)."""

    status_code = 0

    def __init__(self, status_code: int, errors: dict[str, Any], method: str = "", url: str = "") -> None:
        self.status_code = status_code
        self.errors = errors
        self.method = method
        self.url = url
        super().__init__(self.message)

    @property
    def detail(self) -> str:
        """The message about no field in particular, if any."""
        for key in ("detail", "non_field_errors", "error"):
            value = self.errors.get(key)
            if value:
                return value if isinstance(value, str) else "; ".join(str(v) for v in value)
        return ""

    @property
    def field_errors(self) -> dict[str, list[str]]:
        """The messages about fields: {field: [message, …]} (nested fields as `outer.inner`)."""
        found: dict[str, list[str]] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for key, inner in value.items():
                    walk(f"{prefix}.{key}" if prefix else str(key), inner)
            elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                found.setdefault(prefix, []).extend(value)
            elif isinstance(value, list):
                for index, inner in enumerate(value):
                    walk(f"{prefix}[{index}]", inner)
            elif value not in (None, ""):
                found.setdefault(prefix, []).append(str(value))

        for key, value in self.errors.items():
            if key not in ("detail", "non_field_errors", "error"):
                walk(key, value)
        return found

    @property
    def message(self) -> str:
        parts = [self.detail] if self.detail else []
        parts += [f"{field}: {' '.join(messages)}" for field, messages in self.field_errors.items()]
        return "; ".join(parts) or f"HTTP {self.status_code}"

    def __str__(self) -> str:
        return self.message


class BadRequest(APIError):
    """400: the input was invalid; `field_errors` says what is wrong with which field."""

    exit_code = 2


class Unauthorized(APIError):
    """401: no token, or an invalid, expired or revoked one (`portal login` again)."""

    exit_code = 4


class Forbidden(APIError):
    """403: visible, but the role or the token's scope does not allow this."""

    exit_code = 5


class NotFound(APIError):
    """404: no such object, or one in a project you cannot see (the portal never says which)."""

    exit_code = 6


class Conflict(APIError):
    """409: the object's state forbids this now (an offset mismatch, an object still in use, …)."""

    exit_code = 7


class RateLimited(APIError):
    exit_code = 8


class ServerError(APIError):
    exit_code = 9


class RunFailed(PortalError):
    """A run that was waited for finished without succeeding."""

    exit_code = 10

    def __init__(self, run: Any) -> None:
        self.run = run
        reason = f": {run.reason}" if getattr(run, "reason", "") else ""
        super().__init__(f"run {run.pipeline_name}#{run.number} (id {run.id}) {run.status}{reason}")


class WaitTimeout(PortalError):
    exit_code = 11


class UploadError(PortalError):
    """A file's bytes did not arrive as sent (checksum)."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 429: RateLimited}


def error_for(status_code: int, body: Any, method: str = "", url: str = "") -> APIError:
    errors = body if isinstance(body, dict) else {"detail": str(body)[:500] if body else ""}
    cls = _BY_STATUS.get(status_code, ServerError if status_code >= 500 else APIError)
    return cls(status_code, errors, method, url)
