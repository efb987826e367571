"""A small client of the MLflow REST API (standard library only), for the built-in tasks.

The portal injects MLFLOW_TRACKING_URI and MLFLOW_TRACKING_TOKEN (the task's project-scoped token), so the
built-ins record runs and register models without the `mlflow` package in the task environment. Short
timeouts and no retry loops: tracking must never hold a training task for minutes.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import HttpError, TaskError, call_json

TIMEOUT = 15


class TrackingError(TaskError):
    def __init__(self, message: str, error_code: str = "", status: int = 0) -> None:
        super().__init__(message, code=1)
        self.error_code = error_code
        self.status = status


class Tracking:
    def __init__(self, uri: str | None = None, token: str | None = None) -> None:
        self.uri = (uri if uri is not None else os.environ.get("MLFLOW_TRACKING_URI", "")).rstrip("/")
        self.token = token if token is not None else os.environ.get("MLFLOW_TRACKING_TOKEN", "")
        if not self.uri.startswith(("http://", "https://")):
            raise TrackingError(f"MLFLOW_TRACKING_URI must be an http(s) URL, not {self.uri!r}")

    # --- transport ------------------------------------------------------------------------------

    def _request(self, method: str, url: str, data: bytes | None, content_type: str) -> Any:
        try:
            return call_json(method, url, token=self.token, data=data, content_type=content_type, timeout=TIMEOUT)
        except HttpError as exc:
            if not exc.status:
                raise TrackingError(str(exc)) from None
            error = exc.error or {"message": exc.detail[:200]}
            raise TrackingError(
                f"{method} {url}: {exc.status} {error.get('error_code', '')} {error.get('message', '')}".strip(),
                error.get("error_code", ""),
                exc.status,
            ) from None

    def call(self, method: str, endpoint: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}"
        if method == "GET":
            if body:
                url += "?" + urllib.parse.urlencode(body)
            return self._request("GET", url, None, "")
        return self._request(method, url, json.dumps(body or {}).encode(), "application/json")

    # --- experiments and runs ---------------------------------------------------------------------

    def experiment_id(self, name: str) -> str:
        try:
            return self.call("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]["experiment_id"]
        except TrackingError as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
        try:
            return self.call("POST", "experiments/create", {"name": name})["experiment_id"]
        except TrackingError as exc:  # created meanwhile by a parallel task
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.call("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]["experiment_id"]

    def start_run(self, experiment: str, run_name: str | None, tags: dict[str, str]) -> dict[str, Any]:
        body = {
            "experiment_id": self.experiment_id(experiment),
            "start_time": int(time.time() * 1000),
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        if run_name:
            body["run_name"] = run_name
        return self.call("POST", "runs/create", body)["run"]["info"]

    def log_batch(
        self,
        run_id: str,
        *,
        params: dict[str, Any] | None = None,
        metrics: dict[str, float] | None = None,
        history: dict[str, dict[int, float]] | None = None,
    ) -> None:
        """Params, metrics at step 0, and `history`: metrics as {step: value} (at most 1000 points in all)."""
        now = int(time.time() * 1000)
        points = [{"key": k, "value": float(v), "timestamp": now, "step": 0} for k, v in (metrics or {}).items()]
        for key, values in (history or {}).items():
            points += [{"key": key, "value": float(v), "timestamp": now, "step": int(s)} for s, v in values.items()]
        self.call(
            "POST",
            "runs/log-batch",
            {
                "run_id": run_id,
                "params": [{"key": k, "value": str(v)} for k, v in (params or {}).items()],
                "metrics": points,
            },
        )

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)})

    def upload(self, artifact_uri: str, local: Path, path: str) -> None:
        """Upload a file or a folder under `path` of the run's artifacts (proxied artifact service)."""
        prefix = "mlflow-artifacts:"
        if not artifact_uri.startswith(prefix):
            raise TrackingError(f"cannot upload to {artifact_uri!r}: only the proxied artifact service is supported")
        root = artifact_uri[len(prefix) :].lstrip("/")
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        for file in files:
            relative = path if local.is_file() else f"{path}/{file.relative_to(local).as_posix()}"
            url = f"{self.uri}/api/2.0/mlflow-artifacts/artifacts/{urllib.parse.quote(f'{root}/{relative}')}"
            self._request("PUT", url, file.read_bytes(), "application/octet-stream")

    # --- registry ---------------------------------------------------------------------------------

    def register(
        self, name: str, source: str, run_id: str, description: str = "", tags: dict[str, str] | None = None
    ) -> dict[str, Any]:
        try:
            self.call("POST", "registered-models/create", {"name": name})
        except TrackingError as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        body = {"name": name, "source": source, "run_id": run_id}
        if description:
            body["description"] = description
        if tags:
            body["tags"] = [{"key": k, "value": v} for k, v in tags.items()]
        version = self.call("POST", "model-versions/create", body)["model_version"]
        deadline = time.monotonic() + 60
        while version.get("status") == "PENDING_REGISTRATION" and time.monotonic() < deadline:
            time.sleep(0.5)
            version = self.call("GET", "model-versions/get", {"name": name, "version": version["version"]})[
                "model_version"
            ]
        if version.get("status") != "READY":
            raise TrackingError(f"model {name} version {version.get('version')} is {version.get('status')}")
        return version

    def model_version(self, ref: str) -> dict[str, Any]:
        """The model version record (name, version, source, …) of `name/<version>` or `name@<alias>` (what follows
        models:/)."""
        if "@" in ref:
            name, alias = ref.rsplit("@", 1)
            return self.call("GET", "registered-models/alias", {"name": name, "alias": alias})["model_version"]
        if "/" in ref:
            name, number = ref.rsplit("/", 1)
            return self.call("GET", "model-versions/get", {"name": name, "version": number})["model_version"]
        raise TrackingError(f"models:/{ref}: name a version (models:/name/3) or an alias (models:/name@staging)")

    def model_version_source(self, ref: str) -> tuple[str, str]:
        """(artifact URI, "name version N") of `name/<version>` or `name@<alias>` (what follows models:/)."""
        version = self.model_version(ref)
        name = ref.rsplit("@", 1)[0] if "@" in ref else ref.rsplit("/", 1)[0]
        return version["source"], f"{name} version {version['version']}"

    def download(self, artifact_uri: str, target: Path) -> int:
        """Download every file under an artifact URI (proxied artifact service) into `target`; the file count."""
        prefix = "mlflow-artifacts:"
        if not artifact_uri.startswith(prefix):
            raise TrackingError(f"cannot download {artifact_uri!r}: only the proxied artifact service is supported")
        root = artifact_uri[len(prefix) :].strip("/")
        base = f"{self.uri}/api/2.0/mlflow-artifacts/artifacts"
        count, pending = 0, [""]
        while pending:
            relative = pending.pop()
            where = f"{root}/{relative}".rstrip("/")
            listing = self._request("GET", f"{base}?{urllib.parse.urlencode({'path': where})}", None, "")
            for entry in listing.get("files", []):
                child = f"{relative}/{entry['path']}".lstrip("/")
                if entry.get("is_dir"):
                    pending.append(child)
                    continue
                request = urllib.request.Request(f"{base}/{urllib.parse.quote(f'{root}/{child}')}")
                if self.token:
                    request.add_header("Authorization", f"Bearer {self.token}")
                path = target / child
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with urllib.request.urlopen(request, timeout=TIMEOUT) as response, path.open("wb") as fh:
                        while block := response.read(1 << 20):
                            fh.write(block)
                except (urllib.error.URLError, OSError) as exc:
                    raise TrackingError(f"GET {root}/{child}: {exc}") from None
                count += 1
        if not count:
            raise TrackingError(f"{artifact_uri} holds no files")
        return count

    def set_alias(self, name: str, alias: str, version: str) -> None:
        self.call("POST", "registered-models/alias", {"name": name, "alias": alias, "version": str(version)})


def tracked_model(info: dict[str, Any], experiment: str, **extra: Any) -> dict[str, Any]:
    """What a training task writes to tracking.json about the run that holds its model (model-register reads it)."""
    return {
        "run_id": info["run_id"],
        "experiment_id": info["experiment_id"],
        "experiment": experiment,
        "artifact_uri": info["artifact_uri"],
        "model_uri": f"runs:/{info['run_id']}/model",
        "model_source": f"{info['artifact_uri']}/model",
        **extra,
    }
