"""`manage.py runkube`: the long-lived Kubernetes controller (one per portal; a second one stands by)."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand

from apps.runtime.kubernetes.controller import Controller


class Command(BaseCommand):
    help = "Create, watch and follow the logs of the workloads of the kubernetes runtime on their clusters."

    def handle(self, *args: Any, **options: Any) -> None:
        controller = Controller()

        def stop(signum: int, frame: object) -> None:
            controller.stopping.set()
            controller.wake()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"controller {controller.agent.pk} ready on {controller.agent.address}")
        self.stdout.flush()
        controller.run_forever()
