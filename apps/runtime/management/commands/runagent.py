"""`manage.py runagent`: the long-lived supervisor of local workloads (started by `make run`)."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.runtime.local.agent import LocalAgent


class Command(BaseCommand):
    help = "Run workloads of the local runtime as supervised processes on this machine."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-workloads", type=int, default=64, help="At most this many at once.")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = LocalAgent(max_workloads=options["max_workloads"])

        def stop(signum: int, frame: object) -> None:
            agent.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"agent {agent.agent.pk} ready on {agent.agent.address}: {agent.capacity}")
        agent.run_forever()
