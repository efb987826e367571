"""Why a task attempt failed and what to try next, from what is known when it ends (docs/diagnosis.md).

The evidence, in the order it is trusted: the runtime's reason (Kubernetes' OOMKilled, Evicted, ImagePullBackOff,
Unschedulable, the local agent's OOMKilled, timeout and signal), the tail of its log (CUDA out of memory, an NCCL
timeout, ModuleNotFoundError, no space left, connection refused), its resource samples (memory at the limit; the GPU
idle while the CPU is busy) and last its exit code and signal. `RULES` is one ordered table: the first rule that
matches names the cause. A rule says what it saw (`detail`, in English, as the runtime's reasons are: shown through
`portal.lib.reasons`, in the reader's language where a registered format made it); its title and suggestion are
translated when shown, so a stored diagnosis reads in each viewer's language.

`diagnose(facts)` is pure; `diagnose_task(task, exit_code, reason, usage)` gathers the facts of one attempt with two
bounded queries (the last `TAIL_LINES` lines, one aggregate over the samples) and is called by the orchestrator in
the transaction that records the end (apps/jobs/orchestrator.py).
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Count, Max, Q, QuerySet
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from apps.jobs.models import LogLine, PipelineRun, ResourceSample, TaskRun
from apps.jobs.usage_warnings import LOW_GPU_PERCENT, MEMORY_NEAR_LIMIT
from portal.lib import reasons
from portal.lib.resources import Resources, format_bytes

if TYPE_CHECKING:
    from apps.projects.models import Project

TAIL_LINES = 200  # the log lines read, from the end: an error is printed last
MAX_LINE = 1000  # characters of a line looked at (and of a detail kept)
BUSY_CPU_PERCENT = 80.0  # of one core: a data loader working flat out in the main process
INPUT_BOUND_SHARE = 0.5  # of the GPU samples, idle GPU with a busy CPU
MIN_SAMPLES = 5  # seconds of samples before the usage says anything

# The details this module writes, for `portal.lib.reasons` to translate when shown.
USED_OF_LIMIT = reasons.format(gettext_noop("it used %(used)s of its %(limit)s memory limit"))
IDLE_GPU = reasons.format(
    gettext_noop("the GPU was under %(gpu)s busy while the CPU was over %(cpu)s in %(share)s of its samples")
)
SIGNAL = reasons.format(gettext_noop("signal %(number)s (%(name)s)"))
EXIT_CODE = reasons.format(gettext_noop("exit code %(code)s"))


@dataclass(frozen=True)
class Facts:
    """What is known of a failed attempt. `exit_code`: negative for a signal (the local runtime), 128 + n for a
    container killed by signal n; `log_tail`: its last lines, oldest first."""

    exit_code: int | None = None
    reason: str = ""
    log_tail: tuple[str, ...] = ()
    memory_limit: int = 0
    peak_memory: int = 0
    samples: int = 0
    gpu_samples: int = 0
    idle_gpu_busy_cpu: int = 0

    def signal(self) -> int | None:
        """The signal that ended it, from the exit code or the agent's "killed by signal N"."""
        if self.exit_code is not None and self.exit_code < 0:
            return -self.exit_code
        if self.exit_code is not None and 128 < self.exit_code < 160:
            return self.exit_code - 128
        found = re.search(r"killed by signal (\d+)", self.reason)
        return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Rule:
    """`match(facts)` returns what it saw (the detail) or None."""

    cause: str
    match: Callable[[Facts], str | None]
    title: Promise
    suggestion: Promise


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    detail: str


def _in_reason(*words: str) -> Callable[[Facts], str | None]:
    pattern = re.compile("|".join(re.escape(w) for w in words))
    return lambda facts: facts.reason if pattern.search(facts.reason) else None


def _in_log(pattern: str) -> Callable[[Facts], str | None]:
    """The last line of the tail that matches `pattern` (case-insensitive)."""
    compiled = re.compile(pattern, re.IGNORECASE)

    def match(facts: Facts) -> str | None:
        for line in reversed(facts.log_tail):
            if compiled.search(line):
                return line.strip()[:MAX_LINE]
        return None

    return match


def _killed_for_memory(facts: Facts) -> str | None:
    """OOMKilled by Kubernetes or by the local agent's watchdog, which words it the same."""
    if "OOMKilled" in facts.reason:
        return facts.reason.replace("OOMKilled: ", "", 1)
    return None


def _memory_at_limit(facts: Facts) -> str | None:
    if facts.memory_limit and facts.peak_memory >= MEMORY_NEAR_LIMIT * facts.memory_limit:
        return USED_OF_LIMIT % {"used": format_bytes(facts.peak_memory), "limit": format_bytes(facts.memory_limit)}
    return None


def _input_bound(facts: Facts) -> str | None:
    if facts.gpu_samples < MIN_SAMPLES or facts.idle_gpu_busy_cpu < INPUT_BOUND_SHARE * facts.gpu_samples:
        return None
    share = round(100 * facts.idle_gpu_busy_cpu / facts.gpu_samples)
    return IDLE_GPU % {"gpu": f"{LOW_GPU_PERCENT:g}%", "cpu": f"{BUSY_CPU_PERCENT:g}%", "share": f"{share}%"}


CRASH_SIGNALS = {signals.SIGSEGV, signals.SIGBUS, signals.SIGILL, signals.SIGFPE, signals.SIGABRT}


def _signal_words(number: int) -> str:
    try:
        name = signals.Signals(number).name
    except ValueError:
        name = "?"
    return SIGNAL % {"number": number, "name": name}


def _crashed(facts: Facts) -> str | None:
    number = facts.signal()
    return _signal_words(number) if number in CRASH_SIGNALS else None


def _killed(facts: Facts) -> str | None:
    number = facts.signal()
    return _signal_words(number) if number is not None else None


# The last line of a Python traceback (`ValueError: …`) or a line that says it is an error.
_ERROR_LINE = re.compile(r"^\s*([\w.]+(Error|Exception|Exit)\b.*|.*\b(error|fatal)\b.*)$", re.IGNORECASE)


def _failed(facts: Facts) -> str | None:
    for line in reversed(facts.log_tail):
        if _ERROR_LINE.match(line):
            return line.strip()[:MAX_LINE]
    if facts.exit_code not in (None, 0):
        return EXIT_CODE % {"code": facts.exit_code}
    return facts.reason[:MAX_LINE] or None


_OOM_STEPS = _(
    "Lower its peak memory: a smaller batch size (keep the effective batch with gradient accumulation), fp16/bf16 "
    "mixed precision, gradient checkpointing, or reading the data in chunks; or raise the node's memory limit."
)

RULES: tuple[Rule, ...] = (
    # What the runtime saw: the most certain.
    Rule(
        "image_pull",
        _in_reason("ImagePullBackOff", "ErrImagePull", "InvalidImageName"),
        _("image could not be pulled"),
        _(
            "Check the image's name and tag, and the registry credentials of the image (the Images page); the "
            "cluster's nodes must be able to reach the registry."
        ),
    ),
    Rule(
        "unschedulable",
        _in_reason("Unschedulable", "FailedScheduling"),
        _("no node could run it"),
        _(
            "Ask for less (CPU, memory, GPUs) or another GPU type or node selector, or add capacity to the cluster: "
            "the scheduler's message says which resource no node had."
        ),
    ),
    Rule(
        "evicted",
        _in_reason("Evicted"),
        _("evicted by its node"),
        _(
            "Its node ran short of memory or disk: request as much memory as the limit (Guaranteed QoS), write "
            "large files to a volume rather than the container's disk, or run it on a larger node pool."
        ),
    ),
    Rule("oom", _killed_for_memory, _("out of memory"), _OOM_STEPS),
    # What it printed last.
    Rule(
        "gpu_oom",
        _in_log(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError: CUDA|RESOURCE_EXHAUSTED: OOM"),
        _("GPU out of memory"),
        _(
            "Use bf16/fp16 mixed precision, turn on gradient checkpointing, halve the batch size (keep the effective "
            "batch with gradient accumulation), or shard the model over more GPUs (FSDP, ZeRO)."
        ),
    ),
    Rule("oom", _in_log(r"^\s*MemoryError\b|std::bad_alloc|Cannot allocate memory"), _("out of memory"), _OOM_STEPS),
    Rule(
        "nccl_timeout",
        _in_log(r"NCCL.*(timeout|timed out)|Watchdog caught collective operation timeout"),
        _("NCCL timeout"),
        _(
            "A replica stopped joining the collectives: read the log of the replica that failed or hung first, make "
            "sure the replicas reach each other (NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE), run with NCCL_DEBUG=INFO, and "
            "raise the process group's timeout only for steps that are slow on purpose."
        ),
    ),
    Rule(
        "module_not_found",
        _in_log(r"ModuleNotFoundError|ImportError: No module named"),
        _("a Python module is missing"),
        _(
            "Install the package in the task's image or environment (its requirements), or fix the import's name; "
            "on this machine, run the template in the task environment that has it."
        ),
    ),
    Rule(
        "disk_full",
        _in_log(r"No space left on device|ENOSPC"),
        _("no space left on device"),
        _(
            "Free space or give the task a larger volume, keep fewer checkpoints, and point caches (TMPDIR, HF_HOME, "
            "TORCH_HOME) at a disk with room."
        ),
    ),
    Rule(
        "connection_refused",
        _in_log(r"Connection refused|ConnectionRefusedError|ECONNREFUSED"),
        _("connection refused"),
        _(
            "Nothing listened where it connected: check the host and port it was given (its environment), that the "
            "service is up before the task starts, and retry with a backoff (the node's retries)."
        ),
    ),
    # What its samples showed.
    Rule("memory_at_limit", _memory_at_limit, _("memory at its limit"), _OOM_STEPS),
    Rule(
        "input_bound",
        _input_bound,
        _("input-bound: the GPU waited for data"),
        _(
            "Feed the GPU faster: more data-loader workers (DataLoader num_workers), pin_memory and prefetching, "
            "preprocess the data once and cache it, or ask for more CPU cores."
        ),
    ),
    # How it ended.
    Rule(
        "timeout",
        _in_reason("timeout: still running", "DeadlineExceeded", "timed out after"),
        _("timed out"),
        _(
            "Raise the node's timeout if it needs longer, or make it faster (fewer epochs, a sample of the data); "
            "checkpoint so that a retry resumes."
        ),
    ),
    Rule(
        "lost",
        _in_reason("agent lost", "is gone from cluster"),
        _("lost its supervisor"),
        _(
            "What followed it died or its objects were deleted: make sure the agent runs (`manage.py runagent`) and "
            "nothing outside the portal deletes its workloads, then retry the run."
        ),
    ),
    Rule(
        "start_failed",
        _in_reason("could not start:"),
        _("could not start"),
        _("Check the template's command and that its task environment is installed (e.g. `make train-env`)."),
    ),
    Rule(
        "crashed",
        _crashed,
        _("crashed in native code"),
        _(
            "A compiled library crashed: check that the versions of torch, CUDA, numpy and the driver go together, "
            "run with PYTHONFAULTHANDLER=1 to see the Python stack, and try newer versions."
        ),
    ),
    Rule(
        "killed",
        _killed,
        _("killed by a signal"),
        _(
            "Something outside the program stopped it: the system's out-of-memory killer (look at its memory), a "
            "preemption or a person. Retry it (the node's retries); give it a memory limit to have memory named."
        ),
    ),
    Rule(
        "error",
        _failed,
        _("the program failed"),
        _("Read the last lines of its log: the error shown is where it stopped. Fix it and retry the failed nodes."),
    ),
)

_BY_CAUSE: dict[str, Rule] = {}
for _rule in RULES:
    _BY_CAUSE.setdefault(_rule.cause, _rule)
CAUSES: tuple[str, ...] = tuple(_BY_CAUSE)


def cause_choices() -> list[tuple[str, Promise]]:
    return [(cause, rule.title) for cause, rule in _BY_CAUSE.items()]


def diagnose(facts: Facts) -> Diagnosis:
    """The first rule that matches (the last one matches anything)."""
    for rule in RULES:
        detail = rule.match(facts)
        if detail:
            return Diagnosis(rule.cause, detail[:MAX_LINE])
    return Diagnosis("error", "")


def diagnose_task(task: TaskRun, exit_code: int | None, reason: str, usage: dict[str, Any] | None) -> Diagnosis:
    """Gather the facts of a failed attempt (its log's last lines, its samples) and diagnose it."""
    tail = LogLine.objects.filter(task_id=task.pk).order_by("-seq").values_list("text", flat=True)[:TAIL_LINES]
    lines = tuple(text[:MAX_LINE] for text in reversed(list(tail)))
    busy = Q(gpu_percent__lt=LOW_GPU_PERCENT, cpu_percent__gte=BUSY_CPU_PERCENT)
    seen = ResourceSample.objects.filter(task_id=task.pk).aggregate(
        n=Count("pk"), gpu=Count("gpu_percent"), idle=Count("pk", filter=busy), peak=Max("rss_bytes")
    )
    peak = max(seen["peak"] or 0, int((usage or {}).get("peak_rss_bytes") or 0))
    facts = Facts(
        exit_code=exit_code,
        reason=reason,
        log_tail=lines,
        memory_limit=int(Resources.from_json(task.resources or {}).memory or 0),
        peak_memory=peak,
        samples=seen["n"],
        gpu_samples=seen["gpu"],
        idle_gpu_busy_cpu=seen["idle"],
    )
    return diagnose(facts)


def describe(cause: str, detail: str) -> dict[str, str] | None:
    """A stored diagnosis in the active language: {cause, title, message, suggestion, detail}; None without one."""
    rule = _BY_CAUSE.get(cause)
    if rule is None:
        return None
    shown = reasons.translate(detail)
    title = str(rule.title)
    return {
        "cause": cause,
        "title": title,
        "message": f"{title}: {shown}" if shown else title,
        "suggestion": str(rule.suggestion),
        "detail": shown,
    }


def cause_title(cause: str) -> str:
    rule = _BY_CAUSE.get(cause)
    return str(rule.title) if rule is not None else cause


def diagnosed() -> QuerySet[TaskRun]:
    """Attempts with a diagnosis, narrow (what a run's page and its API show of them), oldest first."""
    fields = ("id", "run_id", "node", "attempt", "failure_cause", "failure_detail")
    return TaskRun.objects.exclude(failure_cause="").only(*fields).order_by("created_at", "pk")


def failed_attempts(run: PipelineRun) -> list[TaskRun]:
    return list(diagnosed().filter(run=run))


def project_failures(project: Project) -> dict[str, Any]:
    """The project's failed attempts counted by cause, most frequent first (the API's `task-runs/failures`)."""
    rows = (
        TaskRun.objects.filter(run__project=project)
        .exclude(failure_cause="")
        .values("failure_cause")
        .annotate(n=Count("pk"))
        .order_by("-n", "failure_cause")
    )
    causes = [
        {"cause": row["failure_cause"], "title": cause_title(row["failure_cause"]), "count": row["n"]} for row in rows
    ]
    for item in causes:
        rule = _BY_CAUSE.get(item["cause"])
        item["suggestion"] = str(rule.suggestion) if rule is not None else ""
    return {"project": project.slug, "total": sum(c["count"] for c in causes), "causes": causes}
