"""The portal's side of Label Studio's HTTP API.

label-studio-sdk 2.x would be the natural client, but it pins numpy<=2.2 (through opencv-python-headless) where
the portal runs numpy 2.4: `pip install --dry-run label-studio-sdk==2.1.2` against .venv would downgrade numpy to
2.2.6 and add pandas, nltk, black… (measured; docs/labeling.md). So the SDK lives only in Label Studio's own venv
(`.venv-labelstudio`), where the converter runs (`convert.py`), and the portal speaks the same REST endpoints the
SDK wraps, with httpx: one small class, the calls the SDK makes (`projects.create`, `projects.import_tasks`,
`projects.validate_label_config`, `tasks.list`…), the same paths and bodies.

Every failure to reach the server is `LabelStudioUnavailable` (pages and the API say "Label Studio is down or
starting"); an answer Label Studio refuses is `LabelStudioError` with its status and message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
from django.conf import settings
from django.utils.translation import gettext as _


class LabelStudioUnavailable(RuntimeError):
    """Label Studio cannot be reached (down, starting, not provisioned yet, or labeling is off)."""


class LabelStudioError(RuntimeError):
    """Label Studio answered, and refused."""

    def __init__(self, status: int, detail: Any) -> None:
        self.status, self.detail = status, detail
        super().__init__(f"Label Studio answered {status}: {detail}")


def error_messages(detail: Any) -> list[str]:
    """Label Studio's validation answer ({"validation_errors": {"label_config": [...]}}…) as flat messages."""
    if isinstance(detail, dict):
        inner = detail.get("validation_errors", detail)
        if isinstance(inner, dict):
            messages: list[str] = []
            for value in inner.values():
                messages.extend(error_messages(value))
            return messages or [str(detail)]
        return error_messages(inner)
    if isinstance(detail, list):
        return [m for item in detail for m in error_messages(item)]
    return [str(detail)]


class LabelStudio:
    """A client bound to one server and one access token (legacy `Token` or a personal access token)."""

    def __init__(self, url: str, token: str, *, timeout: float | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._access: str | None = None  # a PAT is a JWT refresh token: exchanged for a short access token
        self.http = httpx.Client(base_url=self.url, timeout=timeout or settings.LABEL_STUDIO_TIMEOUT)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> LabelStudio:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport --------------------------------------------------------------------------------------------
    def _auth(self) -> dict[str, str]:
        if self.token.count(".") == 2:  # a JWT: a personal access token (what the SDK does, core/client_wrapper.py)
            if self._access is None:
                answer = self._send("POST", "/api/token/refresh/", json={"refresh": self.token}, auth=False)
                self._access = answer["access"]
            return {"Authorization": f"Bearer {self._access}"}
        return {"Authorization": f"Token {self.token}"}

    def _send(self, method: str, path: str, *, auth: bool = True, **kwargs: Any) -> Any:
        headers = self._auth() if auth else {}
        try:
            response = self.http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise LabelStudioUnavailable(
                _("Label Studio at %(url)s cannot be reached (%(error)s).") % {"url": self.url, "error": exc}
            ) from exc
        if response.status_code in (502, 503, 504):
            raise LabelStudioUnavailable(_("Label Studio at %(url)s is starting or down.") % {"url": self.url})
        if response.status_code == 401 and auth and self._access is not None:
            self._access = None  # the access token expired: once more with a fresh one
            return self._send(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                detail = response.json()
            except ValueError:
                detail = response.text[:500]
            raise LabelStudioError(response.status_code, detail)
        if not response.content:
            return None
        return response.json()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._send(method, path, **kwargs)

    # --- server -----------------------------------------------------------------------------------------------
    def health(self) -> bool:
        try:
            response = self.http.get("/health", timeout=3)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def version(self) -> dict[str, Any]:
        return self._send("GET", "/api/version")

    def whoami(self) -> dict[str, Any]:
        return self._send("GET", "/api/current-user/whoami")

    # --- projects (SDK: projects.*) ----------------------------------------------------------------------------
    def create_project(self, *, title: str, label_config: str, description: str = "", **fields: Any) -> dict:
        body = {"title": title, "label_config": label_config, "description": description, **fields}
        return self._send("POST", "/api/projects/", json=body)

    def get_project(self, project_id: int) -> dict[str, Any]:
        return self._send("GET", f"/api/projects/{project_id}/")

    def update_project(self, project_id: int, **fields: Any) -> dict[str, Any]:
        return self._send("PATCH", f"/api/projects/{project_id}/", json=fields)

    def delete_project(self, project_id: int) -> None:
        self._send("DELETE", f"/api/projects/{project_id}/")

    def validate_label_config(self, label_config: str) -> None:
        """Raise LabelStudioError (400) when Label Studio refuses the XML (SDK: projects.validate_label_config)."""
        self._send("POST", "/api/projects/validate/", json={"label_config": label_config})

    def import_tasks(self, project_id: int, tasks: list[dict[str, Any]]) -> dict[str, Any]:
        """One import request (SDK: projects.import_tasks(return_task_ids=True)); Community answers synchronously."""
        return self._send("POST", f"/api/projects/{project_id}/import", params={"return_task_ids": "true"}, json=tasks)

    # --- tasks (SDK: tasks.*) ----------------------------------------------------------------------------------
    def list_tasks(
        self, project_id: int, *, fields: str = "all", page_size: int = 500, query: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every task of a project (SDK: tasks.list), or those the Data Manager `query` ({"filters": …}) selects:
        `/api/tasks/` answers {"total", "tasks"} a page at a time."""
        page, seen = 1, 0
        params: dict[str, Any] = {"project": project_id, "fields": fields, "page_size": page_size}
        if query is not None:
            params["query"] = json.dumps(query)
        while True:
            answer = self._send("GET", "/api/tasks/", params={**params, "page": page})
            tasks = answer.get("tasks", [])
            yield from tasks
            seen += len(tasks)
            if not tasks or seen >= answer.get("total", 0):
                return
            page += 1

    def list_projects(self) -> list[dict[str, Any]]:
        projects: list[dict[str, Any]] = []
        page = 1
        while True:
            answer = self._send("GET", "/api/projects/", params={"page": page, "page_size": 100})
            projects.extend(answer.get("results", []))
            if not answer.get("next"):
                return projects
            page += 1
