"""Notebooks for tests, and an agent that only heartbeats (the runtime takes work; nothing runs it)."""

from __future__ import annotations

import os
import socket

from apps.notebooks.models import Notebook
from apps.runtime.models import Agent


def notebook(project, owner, name: str = "eda", **fields) -> Notebook:
    fields = {"cpu": "0.5", "memory_bytes": 512 * 2**20, **fields}
    return Notebook.objects.create(project=project, owner=owner, name=name, **fields)


def heartbeat_agent(cpu: float = 4, memory_bytes: int = 8 * 2**30, gpu: float = 0) -> Agent:
    """A live local agent as the runtime sees it: submitted workloads wait for it, and the capacity is known."""
    return Agent.objects.create(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        address="127.0.0.1:9",  # the discard port: wake-ups go nowhere
        capacity={"cpu": cpu, "memory_bytes": memory_bytes, "gpu": gpu},
    )
