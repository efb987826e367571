"""The MLOps portal's Python SDK: `Client(url, token)` over /api/v1/, and the `portal` command line."""

from portal_client import dsl
from portal_client.client import Client
from portal_client.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PortalError,
    RunFailed,
    ServerError,
    TransportError,
    Unauthorized,
    UploadError,
    WaitTimeout,
)

__all__ = [
    "APIError",
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "NotFound",
    "PortalError",
    "RunFailed",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "UploadError",
    "WaitTimeout",
    "dsl",
]
__version__ = "0.1.0"
