"""`manage.py runkube`: the Kubernetes runtime's leader (one per portal; a second one stands by). It holds what must
be long-lived — watch streams and log follows; applying, deleting and inventories are Celery tasks on the
`kubernetes` queue (apps/runtime/tasks.py, docs/kubernetes.md)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from apps.runtime.kubernetes.controller import Controller


class Command(BaseCommand):
    help = (
        "Watch the workloads of the kubernetes runtime on their clusters and follow their logs (the `kubernetes` "
        "queue's workers create and delete them)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # The handlers go in before the controller registers (its Agent row is what says it is up): a SIGTERM sent
        # as soon as it shows must stop it cleanly too, not kill it with the default action.
        requested = threading.Event()
        controller: Controller | None = None

        def stop(signum: int, frame: object) -> None:
            requested.set()
            if controller is not None:
                controller.stopping.set()
                controller.wake()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        controller = Controller()
        if requested.is_set():
            controller.stopping.set()
        self.stdout.write(f"controller {controller.agent.pk} ready on {controller.agent.address}")
        self.stdout.flush()
        controller.run_forever()
