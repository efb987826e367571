"""The raw-Celery side of bench/orchestration.py: the same no-op work as the portal's nodes."""

import subprocess

from portal.celery import app


@app.task(name="bench.noop", ignore_result=False)
def noop(*_args: object) -> None:
    subprocess.run(["/bin/true"], check=True)
