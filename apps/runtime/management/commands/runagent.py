"""`manage.py runagent`: the long-lived supervisor of local workloads (started by `make run`)."""

from __future__ import annotations

import gc
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.runtime.local.agent import LocalAgent
from portal.lib import publish


class Command(BaseCommand):
    help = "Run workloads of the local runtime as supervised processes on this machine."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-workloads", type=int, default=64, help="At most this many at once.")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = LocalAgent(max_workloads=options["max_workloads"])
        publish.prepare()
        # Django and the agent, loaded by now, live as long as the process: out of the garbage collector's way. Its
        # full collections walked them all: while a task's lines streamed (bench/logs.py), one stopped every thread
        # for 100-200 ms. With this and the same in the web process, p99 print-to-browser went from ~220 to ~110 ms.
        gc.freeze()

        def stop(signum: int, frame: object) -> None:
            agent.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"agent {agent.agent.pk} ready on {agent.agent.address}: {agent.capacity}")
        agent.run_forever()
