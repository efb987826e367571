"""Domain errors of tracking and the registry, carrying MLflow's error codes (the client relies on them)."""

from __future__ import annotations


class TrackingError(Exception):
    """A failed tracking/registry operation; `error_code` and `status` are what the MLflow API answers."""

    error_code = "INTERNAL_ERROR"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def as_dict(self) -> dict[str, str]:
        return {"error_code": self.error_code, "message": self.message}


class InvalidParameter(TrackingError):
    error_code = "INVALID_PARAMETER_VALUE"
    status = 400


class RequestTooLarge(TrackingError):
    """A body over the portal's limit (portal/lib/bodylimit.py); 413, which the MLflow client does not retry."""

    error_code = "REQUEST_LIMIT_EXCEEDED"
    status = 413


class QuotaExceeded(TrackingError):
    """A write over the project's storage quota; 413 (the MLflow client retries 429, which would not help)."""

    error_code = "RESOURCE_EXHAUSTED"
    status = 413


class TemporarilyUnavailable(TrackingError):
    """A request stopped by the statement time limit (portal/lib/dbtimeout.py): retry it narrower or later."""

    error_code = "TEMPORARILY_UNAVAILABLE"
    status = 503


class NotFound(TrackingError):
    error_code = "RESOURCE_DOES_NOT_EXIST"
    status = 404


class AlreadyExists(TrackingError):
    error_code = "RESOURCE_ALREADY_EXISTS"
    status = 400


class ResourceConflict(TrackingError):
    """The object is still used (a service serves a version): MLflow's RESOURCE_CONFLICT."""

    error_code = "RESOURCE_CONFLICT"
    status = 409


class Forbidden(TrackingError):
    error_code = "PERMISSION_DENIED"
    status = 403


class Unauthenticated(TrackingError):
    error_code = "UNAUTHENTICATED"
    status = 401


class BadEndpoint(TrackingError):
    error_code = "ENDPOINT_NOT_FOUND"
    status = 404
