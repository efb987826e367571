"""Each diagnosis rule on the facts that make it (apps/jobs/diagnosis.py), Kubernetes' on recorded pod statuses as the
controller reads them (`status.observe`), and how a stored diagnosis reads. The rules on real failing processes:
test_diagnosis_live.py."""

from __future__ import annotations

import pytest

from apps.jobs.diagnosis import CAUSES, RULES, Facts, describe, diagnose
from apps.runtime.kubernetes.manifests.dispatch import phase_of, replica_of
from apps.runtime.kubernetes.status import observe
from apps.runtime.workload import Phase

MiB = 2**20
NO_ENV = "could not start: [Errno 2] No such file or directory: '/opt/envs/train/bin/python'"
TRACEBACK = ("Traceback (most recent call last):", '  File "<string>", line 1, in <module>')


@pytest.mark.parametrize(
    ("facts", "cause", "detail"),
    [
        (
            Facts(137, "OOMKilled: the task used 412 MiB, over its memory limit of 128 MiB"),
            "oom",
            "the task used 412 MiB, over its memory limit of 128 MiB",
        ),
        (Facts(1, "exited with code 1", (*TRACEBACK, "MemoryError")), "oom", "MemoryError"),
        (
            Facts(1, "exited with code 1", ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",)),
            "gpu_oom",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            Facts(1, "exited with code 1", ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(...)",)),
            "nccl_timeout",
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(...)",
        ),
        (
            Facts(1, "exited with code 1", (*TRACEBACK, "ModuleNotFoundError: No module named 'transformers'")),
            "module_not_found",
            "ModuleNotFoundError: No module named 'transformers'",
        ),
        (
            Facts(1, "exited with code 1", ("OSError: [Errno 28] No space left on device: '/out/ckpt.pt'",)),
            "disk_full",
            "OSError: [Errno 28] No space left on device: '/out/ckpt.pt'",
        ),
        (
            Facts(1, "exited with code 1", ("ConnectionRefusedError: [Errno 111] Connection refused",)),
            "connection_refused",
            "ConnectionRefusedError: [Errno 111] Connection refused",
        ),
        (
            Facts(1, "exited with code 1", memory_limit=256 * MiB, peak_memory=240 * MiB),
            "memory_at_limit",
            "it used 240 MiB of its 256 MiB memory limit",
        ),
        (
            Facts(1, "exited with code 1", samples=60, gpu_samples=60, idle_gpu_busy_cpu=45),
            "input_bound",
            "the GPU was under 20% busy while the CPU was over 80% in 75% of its samples",
        ),
        (Facts(None, "timeout: still running after 3 s"), "timeout", "timeout: still running after 3 s"),
        (Facts(-11, "killed by signal 11"), "crashed", "signal 11 (SIGSEGV)"),
        (Facts(139, "container main exited with code 139"), "crashed", "signal 11 (SIGSEGV)"),
        (Facts(-9, "killed by signal 9"), "killed", "signal 9 (SIGKILL)"),
        (Facts(143, "replica 0: container main exited with code 143"), "killed", "signal 15 (SIGTERM)"),
        (Facts(None, "replica 1 killed by signal 15"), "killed", "signal 15 (SIGTERM)"),
        (
            Facts(None, "agent lost: the process supervising it died"),
            "lost",
            "agent lost: the process supervising it died",
        ),
        (
            Facts(None, "could not start: [Errno 2] No such file"),
            "start_failed",
            "could not start: [Errno 2] No such file",
        ),
        (Facts(2, "exited with code 2", (*TRACEBACK, "ValueError: bad input", "")), "error", "ValueError: bad input"),
        (Facts(3, "exited with code 3", ("step 1", "step 2")), "error", "exit code 3"),
    ],
)
def test_each_rule_names_its_cause_and_what_it_saw(facts, cause, detail):
    found = diagnose(facts)
    assert (found.cause, found.detail) == (cause, detail)


def test_the_runtimes_word_wins_over_the_log_and_the_log_over_the_samples():
    oom_and_module = Facts(137, "OOMKilled: the task used 1 GiB", ("ModuleNotFoundError: No module named 'x'",))
    assert diagnose(oom_and_module).cause == "oom"
    module_at_limit = Facts(1, "exited with code 1", ("ModuleNotFoundError: No module named 'x'",), 100 * MiB, 99 * MiB)
    assert diagnose(module_at_limit).cause == "module_not_found"
    # A GPU idle in too few samples says nothing; a killed task below its limit is killed, not out of memory.
    assert diagnose(Facts(-9, "killed by signal 9", samples=3, gpu_samples=3, idle_gpu_busy_cpu=3)).cause == "killed"
    assert diagnose(Facts(-9, "killed by signal 9", memory_limit=100 * MiB, peak_memory=50 * MiB)).cause == "killed"


def test_the_newest_matching_line_is_the_detail():
    lines = ("ModuleNotFoundError: No module named 'a'", "retrying", "ModuleNotFoundError: No module named 'b'")
    assert diagnose(Facts(1, "exited with code 1", lines)).detail == "ModuleNotFoundError: No module named 'b'"


def test_every_cause_has_a_title_and_a_suggestion():
    assert len(CAUSES) == len({rule.cause for rule in RULES})
    for rule in RULES:
        assert str(rule.title)
        assert len(str(rule.suggestion)) > 20


def test_a_diagnosis_reads_as_cause_detail_and_next_step():
    shown = describe("oom", "the task used 412 MiB, over its memory limit of 128 MiB")
    assert shown["message"] == "out of memory: the task used 412 MiB, over its memory limit of 128 MiB"
    assert "fp16/bf16" in shown["suggestion"]
    assert "gradient checkpointing" in shown["suggestion"]
    assert "smaller batch" in shown["suggestion"]
    assert "data-loader workers" in describe("input_bound", "")["suggestion"]
    assert describe("input_bound", "")["message"] == "input-bound: the GPU waited for data"
    assert describe("no-such-cause", "x") is None


# --- Kubernetes: recorded pod statuses, read as the controller reads them --------------------------------------


def _job(failed: dict | None = None, active: int = 0) -> dict:
    conditions = [{"type": "Failed", "status": "True", **failed}] if failed else []
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "task-9"},
        "spec": {"activeDeadlineSeconds": 1800, "backoffLimit": 0},
        "status": {"conditions": conditions, "active": active, "ready": 0},
    }


def _pod(status: dict, name: str = "task-9-0-x7k2p") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"batch.kubernetes.io/job-completion-index": "0"},
            "creationTimestamp": "2026-01-05T10:00:00Z",
        },
        "spec": {"containers": [{"name": "main", "image": "registry.example.com/team/train:2.1"}]},
        "status": status,
    }


def _terminated(code: int, reason: str) -> dict:
    state = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": "2026-01-05T10:05:00Z"}}
    return {"phase": "Failed", "containerStatuses": [{"name": "main", "state": state}]}


FAILED = {"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
OOM_KILLED = _pod(_terminated(137, "OOMKilled"))
EVICTED = _pod(
    {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.",
    }
)
PULL_BACKOFF = _pod(
    {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.example.com/team/train:2.1",
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "registry.example.com/team/train:2.1"',
                    }
                },
            }
        ],
    }
)
UNSCHEDULABLE = _pod(
    {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
)
SEGFAULT = _pod(_terminated(139, "Error"))


def _observed(job: dict, pod: dict):
    return observe(job, [pod], phase_of=phase_of, replica_of=replica_of, pull_grace=0, now=None)


@pytest.mark.parametrize(
    ("job", "pod", "cause", "seen"),
    [
        (_job(FAILED), OOM_KILLED, "oom", "container main exceeded its memory limit"),
        (_job(FAILED), EVICTED, "evicted", "The node was low on resource: memory."),
        (_job(active=1), PULL_BACKOFF, "image_pull", "registry.example.com/team/train:2.1"),
        (_job(active=1), UNSCHEDULABLE, "unschedulable", "3 Insufficient nvidia.com/gpu"),
        (_job(FAILED), SEGFAULT, "crashed", "signal 11 (SIGSEGV)"),
    ],
)
def test_kubernetes_failures_from_recorded_pod_statuses(job, pod, cause, seen):
    """What the controller reports when it ends a workload (a fatal wait fails it with the pending reason)."""
    observed = _observed(job, pod)
    if observed.phase == Phase.PENDING:
        assert observed.reason  # the wait's reason is what the task's end carries
    found = diagnose(Facts(observed.exit_code, observed.reason))
    assert found.cause == cause, observed
    assert seen in found.detail
