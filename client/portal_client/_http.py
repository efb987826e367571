"""The HTTP core: the token, the base URL, errors mapped to exceptions, and pagination."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from portal_client.errors import TransportError, error_for

API = "/api/v1/"


class Http:
    """One httpx client for one portal; every path is relative to `/api/v1/` unless absolute."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 60.0, client: httpx.Client | None = None):
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Accept": "application/json", "User-Agent": "portal-client/0.1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.client = client or httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def absolute(self, path: str) -> str:
        if path.startswith(("http://", "https://")):
            return path
        if path.startswith("/"):
            return self.url + path
        return self.url + API + path

    def request(self, method: str, path: str, *, expect_json: bool = True, **kwargs: Any) -> httpx.Response:
        url = self.absolute(path)
        try:
            response = self.client.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = response.text
            raise error_for(response.status_code, body, method, url)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if not response.content:
            return None
        return response.json()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.json("GET", path, params=_clean(params))

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.json("POST", path, json=body if body is not None else {}, **kwargs)

    def patch(self, path: str, body: Any) -> Any:
        return self.json("PATCH", path, json=body)

    def delete(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.json("DELETE", path, params=_clean(params))

    def pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list, following `next` (page-number or cursor pages alike)."""
        page = self.get(path, params)
        while True:
            if isinstance(page, list):  # an unpaginated list
                yield from page
                return
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.get(page["next"])

    def stream(self, method: str, path: str, **kwargs: Any) -> Any:
        """A streamed response (a context manager); errors raised before the body is read."""
        url = self.absolute(path)
        return _Streamed(self, self.client.stream(method, url, **kwargs), method, url)


class _Streamed:
    def __init__(self, http: Http, context: Any, method: str, url: str) -> None:
        self.http, self.context, self.method, self.url = http, context, method, url

    def __enter__(self) -> httpx.Response:
        try:
            response = self.context.__enter__()
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach {self.http.url}: {exc}") from exc
        if response.status_code >= 400:
            response.read()
            try:
                body: Any = response.json()
            except ValueError:
                body = response.text
            self.context.__exit__(None, None, None)
            raise error_for(response.status_code, body, self.method, self.url)
        return response

    def __exit__(self, *exc: Any) -> None:
        self.context.__exit__(*exc)


def _clean(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None}
