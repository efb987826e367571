"""`manage.py runlabelstudio`: the `labelstudio` process of `make run` — a Label Studio server on loopback,
provisioned headlessly on its first start (an admin account and an API token the portal keeps, encrypted).

It stays in the foreground while the server runs (the supervisor restarts it when it exits) and passes SIGTERM and
SIGINT on to the server's process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.labeling import server


class Command(BaseCommand):
    help = "Start the local Label Studio server (loopback) and provision it on first start."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the first answer")

    def handle(self, *args: Any, timeout: float, **options: Any) -> None:
        if not server.enabled():
            raise CommandError("labeling is off (LABELING=off): no Label Studio to start")
        if server.external():
            raise CommandError(f"LABEL_STUDIO_URL is set ({settings.LABEL_STUDIO_URL}): nothing to start here")
        local = server.local_server()
        try:
            process = local.start()
        except (FileNotFoundError, OSError) as exc:
            raise CommandError(str(exc)) from exc

        def forward(signum: int, _frame: Any) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        self.stdout.write(f"Label Studio starting on {local.url} (data in {local.data_dir})")
        try:
            from apps.labeling.launch import wait_ready

            version = wait_ready(local.url, local.token, timeout=timeout, process=process)
        except (RuntimeError, TimeoutError, PermissionError) as exc:
            forward(signal.SIGTERM, None)
            process.wait(timeout=30)
            raise CommandError(str(exc)) from exc
        server.mark_provisioned(version)
        self.stdout.write(f"Label Studio ready on {local.url}")
        sys.exit(process.wait())
