"""POST a JSON message with the run's details to a webhook (Slack/Mattermost-compatible `text` included)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from apps.jobs.builtin_tasks._common import fail, flag, log, parser

RUN_ENV = {
    "project": "PORTAL_PROJECT",
    "pipeline": "PORTAL_PIPELINE",
    "run_id": "PORTAL_RUN_ID",
    "task": "PORTAL_TASK",
    "attempt": "PORTAL_TASK_ATTEMPT",
}


def build_parser() -> argparse.ArgumentParser:
    p = parser("notify", __doc__)
    p.add_argument(*flag("url"), required=True, help="the webhook URL (http or https)")
    p.add_argument(*flag("message"), required=True, help="the text to send")
    p.add_argument(
        *flag("token"),
        default="",
        help="sent as 'Authorization: Bearer <token>' (default: the NOTIFY_TOKEN env var, which keeps it off the "
        "command line)",
    )
    p.add_argument(*flag("extra"), default="", help="a JSON object merged into the payload")
    p.add_argument(*flag("timeout"), type=float, default=10.0, help="seconds to wait for the webhook")
    return p


def payload(message: str, extra: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"text": message, "message": message}
    body.update({key: os.environ[name] for key, name in RUN_ENV.items() if os.environ.get(name)})
    body.update(extra)
    return body


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    url = urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        return fail(f"--url must be an http(s) URL, got {args.url!r}")
    if args.timeout <= 0:
        return fail("--timeout must be greater than 0")
    extra: dict[str, Any] = {}
    if args.extra.strip():
        try:
            extra = json.loads(args.extra)
        except ValueError as exc:
            return fail(f"--extra is not valid JSON: {exc}")
        if not isinstance(extra, dict):
            return fail("--extra must be a JSON object")
    data = json.dumps(payload(args.message, extra)).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "mlops-portal-notify/1"}
    token = args.token or os.environ.get("NOTIFY_TOKEN", "")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(args.url, data=data, headers=headers, method="POST")
    where = f"{url.scheme}://{url.hostname}{f':{url.port}' if url.port else ''}"  # never echo credentials
    log(f"POST {len(data)} bytes to {where}")
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        return fail(f"the webhook answered HTTP {exc.code} {exc.reason}{f': {detail}' if detail else ''}", 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return fail(f"cannot reach {where}: {reason}", 1)
    log(f"delivered: HTTP {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
