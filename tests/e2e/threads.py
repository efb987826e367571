"""Work the browser tests do off the thread that holds Playwright's event loop, from which nothing can be published
(the embedded channel layer's send runs an event loop of its own)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.db import connections


def elsewhere(work):
    """Run `work` on another thread and wait for it (its database connections are closed after)."""

    def wrapped():
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(wrapped).result()
