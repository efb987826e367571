"""An indexer that writes chunks in the caller's thread and transaction, so tests see them at once (the agent's runs
a thread of its own: tests/jobs/test_task_sink.py). It writes a task's chunks when the task finishes or the test
says `index_pending()`, never by the clock."""

from __future__ import annotations

import time

from apps.jobs.logindex import ChunkIndexer, Piece

NEVER = float("inf")


class InlineIndexer(ChunkIndexer):
    def __init__(self, chunk_lines: int) -> None:
        super().__init__(chunk_lines, quiet=NEVER, max_wait=NEVER)

    def add(self, piece: Piece) -> None:
        self._write(self.take(piece, time.monotonic()))

    def finish(self, task_id: int) -> None:
        self._write(self.take(task_id, time.monotonic()))

    def index_pending(self) -> None:
        self._write(self.drain())
