"""The rule kinds: one evaluator per kind, registered by name. The engine (apps/alerts/engine.py) knows only this
interface, so a new kind (a drift score above a threshold, say) is one more class here, nothing else.

Two ways a kind sees its condition:
- **event** kinds (`events` names what they listen to: "run_finished", "notebook_culled") get each event of their
  project through `on_event` and answer what fires and what clears;
- **threshold** kinds are asked by the beat (`evaluate`, every PORTAL_ALERTS_INTERVAL seconds) for every condition
  that holds now; one no longer reported is cleared.

A `Finding` with `instant=True` is a one-off announcement (a run succeeded, a notebook was culled): it is recorded
and sent once, and closed at once without a "resolved" message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db.models.functions import Coalesce
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.monitoring.models import DriftMonitor
from apps.notebooks.models import Notebook
from apps.projects import storage, usage
from apps.projects.models import Quota
from apps.serving.models import InferenceService, RevisionTraffic
from apps.serving.stats import BOUNDS_MS, quantile


@dataclass(frozen=True)
class Param:
    """One parameter of a kind: how the form, the API and the service read it."""

    name: str
    label: Any
    type: str  # "int" | "float" | "text"
    required: bool = True
    default: Any = None
    min: float | None = None
    max: float | None = None
    help: Any = ""

    def clean(self, raw: Any) -> Any:
        if raw in (None, ""):
            if self.required and self.default is None:
                raise ValueError(_("This parameter is required."))
            return self.default
        if self.type == "text":
            if not isinstance(raw, str):
                raise ValueError(_("Enter a name."))
            return raw.strip()[:100]
        try:
            value: float = int(raw) if self.type == "int" else float(raw)
        except (TypeError, ValueError):
            raise ValueError(_("Enter a whole number.") if self.type == "int" else _("Enter a number.")) from None
        if isinstance(raw, bool) or value != value:  # booleans are ints to Python; NaN is no threshold
            raise ValueError(_("Enter a number."))
        if self.min is not None and value < self.min:
            raise ValueError(_("Must be at least %(n)s.") % {"n": self.min})
        if self.max is not None and value > self.max:
            raise ValueError(_("Must be at most %(n)s.") % {"n": self.max})
        return value


@dataclass
class Finding:
    """A condition that holds (or an event that happened) for one `key` of a rule."""

    key: str
    subject: str
    message: str
    value: float | None = None
    url: str = ""
    instant: bool = False


@dataclass
class Clear:
    """A condition that no longer holds (event kinds say so themselves; threshold kinds by not reporting it)."""

    key: str
    message: str = ""


class RuleKind:
    """The interface of a kind; subclasses set the class attributes and override `evaluate` or `on_event`."""

    name: ClassVar[str]
    label: ClassVar[Any]
    description: ClassVar[Any] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    events: ClassVar[tuple[str, ...]] = ()  # empty: a threshold kind, evaluated by the beat

    @property
    def is_threshold(self) -> bool:
        return not self.events

    def clean_params(self, raw: Any) -> dict[str, Any]:
        """The kind's parameters from what a form or the API sent; ValidationError keyed "params.<name>"."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ValidationError({"params": [_("Expected an object of parameters.")]})
        known = {p.name for p in self.params}
        errors: dict[str, list[str]] = {
            f"params.{name}": [_("Unknown parameter of this kind.")] for name in raw if name not in known
        }
        cleaned: dict[str, Any] = {}
        for param in self.params:
            try:
                value = param.clean(raw.get(param.name))
            except ValueError as exc:
                errors[f"params.{param.name}"] = [str(exc)]
                continue
            if value not in (None, ""):
                cleaned[param.name] = value
        if errors:
            raise ValidationError(errors)
        return cleaned

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        """Threshold kinds: every condition that holds now."""
        return []

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        """Event kinds: what `event` about `obj` (of the rule's project) fires or clears."""
        return []


KINDS: dict[str, RuleKind] = {}


def register(kind_class: type[RuleKind]) -> type[RuleKind]:
    KINDS[kind_class.name] = kind_class()
    return kind_class


def kind_choices() -> list[tuple[str, str]]:
    return [(name, str(kind.label)) for name, kind in KINDS.items()]


# --- Pipeline runs --------------------------------------------------------------------------------------------------

PIPELINE = Param(
    "pipeline", gettext_lazy("pipeline"), "text", required=False, help=gettext_lazy("Its name; empty: every pipeline.")
)


def _run_url(run: PipelineRun) -> str:
    return reverse("jobs:run-detail", kwargs={"project": run.project.slug, "pk": run.pk})


def _run_matches(rule: Any, run: PipelineRun) -> bool:
    wanted = rule.params.get("pipeline")
    return not wanted or run.pipeline_name == wanted


def _run_name(run: PipelineRun) -> str:
    return f"{run.pipeline_name} #{run.number}"


@register
class RunFailed(RuleKind):
    """Fires when a run of the pipeline fails, stays one alert while later runs fail too, clears when one succeeds."""

    name = "run_failed"
    label = gettext_lazy("Pipeline run failed")
    description = gettext_lazy("Fires on a failed run; clears when a later run of the same pipeline succeeds.")
    params = (PIPELINE,)
    events = ("run_finished",)

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        run: PipelineRun = obj
        if not _run_matches(rule, run):
            return []
        key = f"pipeline:{run.pipeline_name}"
        if run.status == RunStatus.FAILED:
            message = _("Run %(run)s failed: %(reason)s") % {"run": _run_name(run), "reason": run.reason or "-"}
            return [Finding(key, _("pipeline %(name)s") % {"name": run.pipeline_name}, message, url=_run_url(run))]
        if run.status == RunStatus.SUCCEEDED:
            return [Clear(key, _("Run %(run)s succeeded.") % {"run": _run_name(run)})]
        return []


@register
class RunSucceeded(RuleKind):
    """Announces each successful run (once; nothing to clear)."""

    name = "run_succeeded"
    label = gettext_lazy("Pipeline run succeeded")
    description = gettext_lazy("One message per successful run.")
    params = (PIPELINE,)
    events = ("run_finished",)

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        run: PipelineRun = obj
        if run.status != RunStatus.SUCCEEDED or not _run_matches(rule, run):
            return []
        seconds = (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else 0
        message = _("Run %(run)s succeeded in %(s)d s.") % {"run": _run_name(run), "s": seconds}
        return [Finding(f"run:{run.pk}", _("run %(run)s") % {"run": _run_name(run)}, message, url=_run_url(run),
                        instant=True)]  # fmt: skip


@register
class RunDuration(RuleKind):
    """Fires for each run still going after `minutes` (from its start, or its creation while queued); clears when
    the run ends."""

    name = "run_duration"
    label = gettext_lazy("Pipeline run exceeded a duration")
    description = gettext_lazy("Fires while a run has been going for longer than the given minutes.")
    params = (Param("minutes", gettext_lazy("minutes"), "int", min=1, max=7 * 24 * 60), PIPELINE)

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        minutes = rule.params["minutes"]
        runs = (
            PipelineRun.objects.filter(
                project=rule.project, status__in=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING]
            )
            .annotate(since=Coalesce("started_at", "created_at"))
            .filter(since__lte=now - timedelta(minutes=minutes))
            .select_related("project")
            .order_by("pk")
        )
        if rule.params.get("pipeline"):
            runs = runs.filter(pipeline_name=rule.params["pipeline"])
        findings = []
        for run in runs:
            going = int((now - run.since).total_seconds() // 60)
            message = _("Run %(run)s has been going for %(n)d minutes (limit %(limit)d).") % {
                "run": _run_name(run), "n": going, "limit": minutes,
            }  # fmt: skip
            findings.append(
                Finding(f"run:{run.pk}", _("run %(run)s") % {"run": _run_name(run)}, message, going, _run_url(run))
            )
        return findings


@register
class TaskResourceWarning(RuleKind):
    """Fires for each warning a running task's samples raised (apps/jobs/usage_warnings.py: GPU utilisation low for
    five minutes, memory past 90 % of its limit), one alert per task, warning kind and replica; clears when the task
    is no longer running."""

    name = "task_resource_warning"
    label = gettext_lazy("Task wastes its GPUs or nears its memory limit")
    description = gettext_lazy(
        "Fires while a running task's GPU utilisation has stayed under 20 percent for 5 minutes, or its memory is past "
        "90 percent of its limit."
    )
    params = (PIPELINE,)

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        tasks = (
            TaskRun.objects.filter(run__project=rule.project, status=TaskStatus.RUNNING)
            .exclude(resource_warnings=[])
            .select_related("run__project")
            .defer("run__spec")
            .order_by("pk")
        )
        if rule.params.get("pipeline"):
            tasks = tasks.filter(run__pipeline_name=rule.params["pipeline"])
        findings = []
        for task in tasks:
            subject = _("task %(node)s of run %(run)s") % {"node": task.node, "run": _run_name(task.run)}
            for warning in task.resource_warnings:
                key = f"task:{task.pk}:{warning.get('kind', '')}:{warning.get('replica', '')}"
                message = _("Run %(run)s, task %(node)s: %(reason)s") % {
                    "run": _run_name(task.run), "node": task.node, "reason": warning.get("reason", ""),
                }  # fmt: skip
                findings.append(Finding(key, subject, message, url=_run_url(task.run)))
        return findings


# --- Services (what the serving router records per revision and minute: apps.serving.models.RevisionTraffic) -------

SERVICE = Param(
    "service", gettext_lazy("service"), "text", required=False, help=gettext_lazy("Its name; empty: every service.")
)
WINDOW = Param(
    "minutes", gettext_lazy("minutes"), "int", default=5, min=1, max=60,
    help=gettext_lazy("The window: the traffic of the last N minutes, the current one included."),
)  # fmt: skip
MIN_REQUESTS = Param(
    "min_requests", gettext_lazy("minimum requests"), "int", default=10, min=1,
    help=gettext_lazy("Fewer requests in the window say nothing either way."),
)  # fmt: skip


def service_traffic(rule: Any, now: datetime) -> list[tuple[InferenceService, int, int, list[int]]]:
    """(service, requests, errors, latency buckets) over the rule's window, per service of the project that had
    traffic in it, summed over its revisions and the web processes that counted."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=rule.params.get("minutes", 5) - 1)
    services = InferenceService.objects.filter(project=rule.project).select_related("project")
    if rule.params.get("service"):
        services = services.filter(name=rule.params["service"])
    by_service = {s.pk: s for s in services}
    sums: dict[int, list] = {}
    rows = RevisionTraffic.objects.filter(revision__service_id__in=list(by_service), minute__gte=start).values_list(
        "revision__service_id", "requests", "errors", "latency_buckets"
    )
    for service_id, requests, errors, buckets in rows:
        total = sums.setdefault(service_id, [0, 0, [0] * (len(BOUNDS_MS) + 1)])
        total[0] += requests
        total[1] += errors
        for i, count in enumerate((buckets or [])[: len(total[2])]):
            total[2][i] += count
    return [(by_service[pk], *sums[pk]) for pk in sorted(sums)]


def _service_url(service: InferenceService) -> str:
    return reverse("serving:service-detail", kwargs={"project": service.project.slug, "pk": service.pk})


@register
class ServiceErrorRate(RuleKind):
    name = "service_error_rate"
    label = gettext_lazy("Service error rate above a threshold")
    description = gettext_lazy("Share of requests answered 5xx (or not at all) over the last N minutes.")
    params = (
        Param("threshold", gettext_lazy("threshold (%)"), "float", min=0, max=100), WINDOW, MIN_REQUESTS, SERVICE,
    )  # fmt: skip

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        findings = []
        for service, requests, errors, _buckets in service_traffic(rule, now):
            if requests < rule.params.get("min_requests", 10):
                continue
            rate = 100.0 * errors / requests
            if rate > rule.params["threshold"]:
                message = _(
                    "Service %(name)s answered %(errors)d of %(requests)d requests with an error (%(rate).1f %%) in "
                    "the last %(n)d minutes; the threshold is %(threshold)s %%."
                ) % {"name": service.name, "errors": errors, "requests": requests, "rate": rate,
                     "n": rule.params.get("minutes", 5), "threshold": rule.params["threshold"]}  # fmt: skip
                findings.append(
                    Finding(f"service:{service.pk}", _("service %(name)s") % {"name": service.name}, message,
                            round(rate, 3), _service_url(service))
                )  # fmt: skip
        return findings


@register
class ServiceLatency(RuleKind):
    name = "service_latency"
    label = gettext_lazy("Service p99 latency above a threshold")
    description = gettext_lazy("The 99th percentile of request latency over the last N minutes.")
    params = (Param("threshold", gettext_lazy("threshold (ms)"), "float", min=0), WINDOW, MIN_REQUESTS, SERVICE)

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        findings = []
        for service, requests, _errors, buckets in service_traffic(rule, now):
            if requests < rule.params.get("min_requests", 10):
                continue
            p99 = quantile(buckets, 0.99)
            if p99 is not None and p99 > rule.params["threshold"]:
                message = _(
                    "Service %(name)s: p99 latency %(p99).0f ms over the last %(n)d minutes (%(requests)d requests); "
                    "the threshold is %(threshold)s ms."
                ) % {"name": service.name, "p99": p99, "n": rule.params.get("minutes", 5), "requests": requests,
                     "threshold": rule.params["threshold"]}  # fmt: skip
                findings.append(
                    Finding(f"service:{service.pk}", _("service %(name)s") % {"name": service.name}, message, p99,
                            _service_url(service))
                )  # fmt: skip
        return findings


# --- Drift (what the monitoring app's scheduled checks find: apps.monitoring.models.DriftReport) --------------------


@register
class DriftScore(RuleKind):
    """Fires while a monitor's newest scored report is above the threshold (the monitor's own when none is given);
    resolves once a newer report is at or below it."""

    name = "drift_score"
    label = gettext_lazy("Drift score above a threshold")
    description = gettext_lazy("The overall drift score (largest feature PSI) of a service's newest drift check.")
    params = (
        Param("threshold", gettext_lazy("threshold"), "float", required=False, min=0.001, max=100,
              help=gettext_lazy("Empty: each monitor's own threshold.")),
        SERVICE,
    )  # fmt: skip

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        monitors = DriftMonitor.objects.filter(project=rule.project).select_related("project", "service")
        if rule.params.get("service"):
            monitors = monitors.filter(service__name=rule.params["service"])
        findings = []
        for monitor in monitors:  # a project has a few monitors; each has one newest report (indexed)
            report = monitor.reports.filter(score__isnull=False).order_by("-created_at").first()
            threshold = rule.params.get("threshold") or monitor.threshold
            if report is None or report.score is None or report.score <= threshold:
                continue
            worst = sorted((report.features or {}).items(), key=lambda kv: -(kv[1] or {}).get("psi", 0))[:3]
            message = _(
                "Service %(name)s: drift score %(score).3f is above %(threshold)s (most shifted: %(features)s)."
            ) % {"name": monitor.service.name, "score": report.score, "threshold": threshold,
                 "features": ", ".join(name for name, _stats in worst) or "—"}  # fmt: skip
            url = reverse("monitoring:monitor-detail", kwargs={"project": monitor.project.slug, "pk": monitor.pk})
            findings.append(
                Finding(f"monitor:{monitor.pk}", _("drift of %(name)s") % {"name": monitor.service.name}, message,
                        round(report.score, 6), url)
            )  # fmt: skip
        return findings


# --- Quota ----------------------------------------------------------------------------------------------------------


@register
class QuotaUsage(RuleKind):
    """One alert per resource of the quota (CPU, memory, GPUs, storage) whose use reaches the threshold."""

    name = "quota_usage"
    label = gettext_lazy("Project quota nearly used")
    description = gettext_lazy("Fires per resource (CPU, memory, GPUs, storage) whose use reaches the percentage.")
    params = (Param("threshold", gettext_lazy("threshold (%)"), "float", default=90, min=1, max=100),)

    def evaluate(self, rule: Any, now: datetime) -> list[Finding]:
        quota = Quota.objects.filter(project=rule.project).first()
        if quota is None:
            return []
        used: dict[str, tuple[float, float, str, str]] = {}
        in_use = usage.in_use(rule.project) if quota.limits_anything else None
        if in_use is not None:
            for name, limit, label in (("cpu", quota.cpu_cores, _("CPU cores")), ("gpu", quota.gpus, _("GPUs"))):
                if limit:
                    amount = in_use.amount(name)
                    used[name] = (amount, float(limit), label, f"{amount:g}/{float(limit):g}")
            if quota.memory_bytes:
                amount = in_use.amount("memory")
                used["memory"] = (amount, quota.memory_bytes, _("memory"),
                                  f"{filesizeformat(amount)}/{filesizeformat(quota.memory_bytes)}")  # fmt: skip
        if quota.storage_bytes:
            amount = storage.used_bytes(rule.project)
            used["storage"] = (amount, quota.storage_bytes, _("storage"),
                               f"{filesizeformat(amount)}/{filesizeformat(quota.storage_bytes)}")  # fmt: skip
        findings = []
        url = reverse("projects:settings", kwargs={"project": rule.project.slug})
        for name, (amount, limit, label, words) in used.items():
            percent = 100.0 * float(amount) / float(limit)
            if percent >= rule.params.get("threshold", 90):
                message = _("Project %(project)s uses %(percent).0f %% of its %(what)s quota (%(words)s).") % {
                    "project": rule.project.name, "percent": percent, "what": label, "words": words,
                }  # fmt: skip
                findings.append(Finding(f"quota:{name}", _("quota of %(what)s") % {"what": label}, message,
                                        round(percent, 3), url))  # fmt: skip
        return findings


# --- Notebooks ------------------------------------------------------------------------------------------------------


@register
class NotebookCulled(RuleKind):
    """Announces each notebook the idle culler stopped (once; nothing to clear)."""

    name = "notebook_culled"
    label = gettext_lazy("Notebook stopped for idleness")
    description = gettext_lazy("One message per notebook the idle culler stopped.")
    events = ("notebook_culled",)

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        nb: Notebook = obj
        stamp = int(nb.stopped_at.timestamp()) if nb.stopped_at else 0
        message = _("Notebook %(name)s of %(owner)s was stopped: %(reason)s") % {
            "name": nb.name, "owner": nb.owner.username if nb.owner else "-", "reason": nb.reason or "-",
        }  # fmt: skip
        url = reverse("notebooks:notebook-detail", kwargs={"project": nb.project.slug, "pk": nb.pk})
        return [Finding(f"notebook:{nb.pk}:{stamp}", _("notebook %(name)s") % {"name": nb.name}, message, url=url,
                        instant=True)]  # fmt: skip
