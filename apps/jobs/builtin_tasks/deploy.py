"""Serve a registered model version as an inference service of the run's project, through the portal's API: create
the service (or point an existing one at the version), roll out a revision, and wait until it serves.

The model is the version an upstream node registered (model-register, onnx-optimise, automl: their
registered.json), or one given as models:/name/3; models:/name@alias makes the service follow that alias (it rolls
out whatever the alias points at next). The task's project-scoped token (PORTAL_API_TOKEN) acts as the run's owner,
who must be allowed to change services. Standard library only. docs/serving.md, "Deploying from a pipeline".
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
from typing import Any

from apps.jobs.builtin_tasks._common import (
    HttpError,
    TaskError,
    call_json,
    fail,
    flag,
    input_dirs,
    log,
    output_dir,
    parser,
    write_json,
)

TIMEOUT = 15
POLL_SECONDS = 2.0


def build_parser() -> argparse.ArgumentParser:
    p = parser("deploy", __doc__)
    p.add_argument(*flag("service"), required=True, help="the service's name in the project (created when new)")
    p.add_argument(
        *flag("model"),
        default="",
        help="models:/name/3 or models:/name@alias (follow the alias); default: the upstream registered version",
    )
    p.add_argument(*flag("cpu"), default="0.5", help="CPU cores per replica")
    p.add_argument(*flag("memory"), default="1Gi", help="memory per replica (512Mi, 1Gi)")
    p.add_argument(*flag("replicas"), type=int, default=1, help="replicas at least (and at most, for a new service)")
    p.add_argument(*flag("wait"), type=float, default=600, help="seconds to wait until it serves; 0: do not wait")
    return p


def model_of(given: str) -> tuple[str, int | None, str]:
    """(registered model, version or None, alias or ""): the given reference, else the upstream registered.json."""
    if given:
        rest = given.removeprefix("models:/")
        if rest != given and "@" in rest:
            name, alias = rest.rsplit("@", 1)
            if name and alias:
                return name, None, alias
        elif rest != given and "/" in rest:
            name, number = rest.rsplit("/", 1)
            if name and number.isdigit() and int(number) > 0:
                return name, int(number), ""
        raise TaskError(f"--model {given!r}: give models:/name/3 or models:/name@alias")
    found = [d / "registered.json" for d in input_dirs().values() if (d / "registered.json").is_file()]
    if len(found) != 1:
        raise TaskError(
            "--model: give a registered version (models:/name/3) or put the task after one node that registers "
            f"a version (found {len(found)} registered.json upstream)"
        )
    record = json.loads(found[0].read_text(encoding="utf-8"))
    return str(record["name"]), int(record["version"]), ""


class Api:
    """The portal's REST API as the task's token (PORTAL_API_URL, PORTAL_API_TOKEN)."""

    def __init__(self) -> None:
        self.base = os.environ.get("PORTAL_API_URL", "").rstrip("/") + "/"
        self.token = os.environ.get("PORTAL_API_TOKEN", "")
        if not self.base.startswith(("http://", "https://")) or not self.token:
            raise TaskError("PORTAL_API_URL and PORTAL_API_TOKEN are not set: run this as a task of a pipeline")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        try:
            return call_json(method, self.base + path, token=self.token, data=data, timeout=TIMEOUT)
        except HttpError as exc:
            raise TaskError(f"{method} {path}: {exc.reason}", 1) from None


def find_service(api: Api, project: str, name: str) -> dict[str, Any] | None:
    query = urllib.parse.urlencode({"project": project, "search": name})
    found = api.call("GET", f"services/?{query}")
    rows = found.get("results", found) if isinstance(found, dict) else found
    return next((row for row in rows if row["name"] == name), None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    service_name = args.service.strip()
    if not service_name:
        return fail("--service must not be empty")
    if args.replicas < 1:
        return fail("--replicas must be at least 1")
    project = os.environ.get("PORTAL_PROJECT", "")
    try:
        model, version, alias = model_of(args.model.strip())
        api = Api()
        target = {"registered_model": model, "model_version": version, "follow_alias": alias}
        service = find_service(api, project, service_name)
        if service is None:
            service = api.call(
                "POST",
                "services/",
                {
                    "project": project,
                    "name": service_name,
                    "description": f"Deployed by pipeline {os.environ.get('PORTAL_PIPELINE', '?')}.",
                    **target,
                    "cpu": args.cpu,
                    "memory": args.memory,
                    "min_replicas": args.replicas,
                    "max_replicas": args.replicas,
                },
            )
            log(f"created service {service_name}")
        else:
            service = api.call("PATCH", f"services/{service['id']}/", target)
        what = f"{model} version {version}" if version else f"{model} at alias {alias!r}"
        revision = api.call("POST", f"services/{service['id']}/deploy/", {})
        if not revision.get("id"):  # following an alias that points nowhere yet
            log(f"service {service_name} waits: {revision.get('detail', '')}")
            return record(service, None, model, version, alias)
        log(f"rolling out revision {revision['number']} of {service_name}: {what}")
        if args.wait > 0:
            revision = wait_ready(api, revision, args.wait)
            log(f"service {service_name} serves revision {revision['number']} at {service['url']}")
        return record(service, revision, model, version, alias)
    except TaskError as exc:
        return fail(str(exc), exc.code)


def wait_ready(api: Api, revision: dict[str, Any], wait: float) -> dict[str, Any]:
    """The revision once ready; TaskError when it failed or when `wait` seconds passed."""
    deadline = time.monotonic() + wait
    while True:
        revision = api.call("GET", f"revisions/{revision['id']}/")
        if revision["status"] == "ready":
            return revision
        if revision["status"] in ("failed", "retired"):
            raise TaskError(f"revision {revision['number']} {revision['status']}: {revision.get('reason', '')}", 1)
        if time.monotonic() > deadline:
            raise TaskError(f"revision {revision['number']} is still {revision['status']} after {wait:g} s", 1)
        time.sleep(POLL_SECONDS)


def record(
    service: dict[str, Any], revision: dict[str, Any] | None, model: str, version: int | None, alias: str
) -> int:
    write_json(
        output_dir() / "deployed.json",
        {
            "service": service["name"],
            "id": service["id"],
            "url": service["url"],
            "revision": revision["number"] if revision else None,
            "model": model,
            "version": version,
            "alias": alias,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
