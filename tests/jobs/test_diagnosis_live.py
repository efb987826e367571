"""Failure diagnosis on real processes that fail each way, run by a real local agent under its limits: over a memory
limit, at a memory limit, a missing module, killed by a signal, a segfault, a refused connection, a full disk, and
logs that say CUDA out of memory or an NCCL timeout (no GPU here: the task prints what PyTorch prints). Then the
demo's memory hog, whose run page shows "out of memory: …" with the next step."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.jobs import demo as jobs_demo
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import TaskStatus
from apps.jobs.services import start_run
from tests.conftest import user_client
from tests.factories import pipeline
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live]


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


HOG = "import time\nblock = b'x' * (400 * 2**20)\ntime.sleep(60)\n"
# Holds about 94% of its 256 MiB limit (what its tree holds already counted), then fails without a word.
AT_LIMIT = """
import os, sys, time
def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
block = b"x" * (int(0.94 * 256 * 2**20) - rss(os.getpid()) - rss(os.getppid()))
time.sleep(2.5)
sys.exit(1)
"""
REFUSED = """
import socket
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
socket.create_connection(("127.0.0.1", port), timeout=5)
"""
CUDA = (
    "import sys\nprint('epoch 1', flush=True)\n"
    "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.12 GiB is free.', file=sys.stderr)\nsys.exit(1)\n"
)
NCCL = (
    "import sys\nprint('[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing "
    "out.', file=sys.stderr)\nsys.exit(1)\n"
)
NODES = {
    "hog": ({"memory": "128Mi"}, HOG),
    "at-limit": ({"memory": "256Mi"}, AT_LIMIT),
    "missing": ({}, "import portal_no_such_module\n"),
    "killed": ({}, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
    "segfault": ({}, "import ctypes\nctypes.string_at(0)\n"),
    "refused": ({}, REFUSED),
    "disk": ({}, "with open('/dev/full', 'w') as f:\n    f.write('x' * 10)\n"),
    "cuda": ({}, CUDA),
    "nccl": ({}, NCCL),
}
EXPECTED = {
    "hog": "oom",
    "at-limit": "memory_at_limit",
    "missing": "module_not_found",
    "killed": "killed",
    "segfault": "crashed",
    "refused": "connection_refused",
    "disk": "disk_full",
    "cuda": "gpu_oom",
    "nccl": "nccl_timeout",
}


def test_each_way_of_failing_is_diagnosed_on_the_task_the_page_and_the_api(agent, project, owner):
    nodes = [
        {"name": name, "resources": resources, "args": {"code": code}, "cache": False}
        for name, (resources, code) in NODES.items()
    ]
    made = pipeline(project, owner, nodes, failure_policy="continue")

    run = drive(start_run(made, owner), timeout=180)

    tasks = {t.node: t for t in run.tasks.all()}
    assert {name: t.status for name, t in tasks.items()} == dict.fromkeys(NODES, TaskStatus.FAILED)
    found = {name: t.failure_cause for name, t in tasks.items()}
    assert found == EXPECTED, {name: (t.failure_cause, t.failure_detail, t.reason) for name, t in tasks.items()}
    assert tasks["hog"].failure_detail.startswith("the task used ")
    assert "over its memory limit of 128 MiB" in tasks["hog"].failure_detail
    assert "of its 256 MiB memory limit" in tasks["at-limit"].failure_detail
    assert tasks["missing"].failure_detail == "ModuleNotFoundError: No module named 'portal_no_such_module'"
    assert tasks["killed"].failure_detail == "signal 9 (SIGKILL)"
    assert tasks["segfault"].failure_detail == "signal 11 (SIGSEGV)"
    assert "Connection refused" in tasks["refused"].failure_detail
    assert "No space left on device" in tasks["disk"].failure_detail
    assert "CUDA out of memory" in tasks["cuda"].failure_detail

    # The API: each attempt, the run's failures and the project's counts.
    api = user_client(owner)
    detail = api.get(f"/api/v1/task-runs/{tasks['missing'].pk}/").json()["diagnosis"]
    assert detail["cause"] == "module_not_found"
    assert detail["message"] == "a Python module is missing: " + tasks["missing"].failure_detail
    failures = api.get(f"/api/v1/runs/{run.pk}/").json()["failures"]
    assert sorted(f["node"] for f in failures) == sorted(NODES)
    counts = api.get(f"/api/v1/task-runs/failures/?project={project.slug}").json()
    assert counts["total"] == len(NODES)
    assert {c["cause"]: c["count"] for c in counts["causes"]} == dict.fromkeys(EXPECTED.values(), 1)

    # The run page: each failed node's cause and next step.
    page = client_for(owner).get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert page.count("data-diagnosis=") == len(NODES)
    assert "out of memory: the task used" in page
    assert "more data-loader workers" not in page  # no GPU here: nothing is input-bound


def test_the_demo_memory_hog_shows_out_of_memory_with_the_next_step(agent, project, owner):
    load_builtin_templates()
    hog = jobs_demo.memory_hog_pipeline(project, owner)
    assert jobs_demo.memory_hog_pipeline(project, owner) == hog  # made once

    run = drive(start_run(hog, owner), timeout=120)

    assert run.status == "failed"
    [task] = run.tasks.all()
    assert (task.exit_code, task.failure_cause) == (137, "oom")
    page = client_for(owner).get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-diagnosis="oom"' in page
    assert "out of memory: the task used " in page
    assert "over its memory limit of 128 MiB" in page
    assert "fp16/bf16 mixed precision, gradient checkpointing" in page
