"""The Celery app. Broker: Redis when REDIS_URL is set, otherwise a folder under var/ (no server)."""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.on_configure.connect
def _make_broker_folders(sender: Celery, **kwargs: object) -> None:
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)


app.autodiscover_tasks()
