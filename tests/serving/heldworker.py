"""A step of a pipeline pickled for model-server tests: a worker process slow to load its model, held as long
as the test likes. Importable by the server's processes (they run from the repository root)."""

from __future__ import annotations

import os
import time
from typing import Any

HOLD_ENV = "HOLD_WORKER_UNTIL"  # a path: the held worker goes on once it exists
_passed = False


def held_in_all_workers_but_one(x: Any) -> Any:
    """The identity; in every --workers process but the first to get here, the first call (the server's probe of
    the model while it loads) waits until the file named by $HOLD_WORKER_UNTIL exists. The parent process, which
    loads the model before it starts its workers, is never held."""
    global _passed
    if _passed or "MODELSERVER_CONFIG" not in os.environ or HOLD_ENV not in os.environ:
        return x
    _passed = True
    release = os.environ[HOLD_ENV]
    try:
        os.close(os.open(release + ".first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        while not os.path.exists(release):
            time.sleep(0.02)
    return x
