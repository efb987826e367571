"""Retrain policies and data monitors: create, change, delete; check a new dataset version; start a policy (as its
owner, through the jobs app's run start and its permission check). The gate that judges what a retraining
registered is in `gate.py`."""

from __future__ import annotations

import copy
import logging
import re
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.datasets.models import Dataset, DatasetVersion
from apps.jobs.models import Pipeline
from apps.jobs.services import start_spec_run
from apps.models.errors import InvalidParameter
from apps.models.models import ModelAlias, RegisteredModel
from apps.models.validation import validate_alias
from apps.monitoring.models import DriftMonitor
from apps.outbox.services import enqueue
from apps.projects.models import Project
from apps.retraining import datachange
from apps.retraining.models import DataCheck, DataMonitor, Retraining, RetrainPolicy

logger = logging.getLogger(__name__)

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")
PLACEHOLDERS = ("{version}", "{previous}", "{champion}", "{champion_version}", "{reason}")  # docs/retraining.md


def _pick(queryset: Any, value: Any, field: str = "name") -> Any:
    """A row of `queryset` given as a row, its id or its `field`; None when not there."""
    if value in (None, ""):
        return None
    if hasattr(value, "pk"):
        return queryset.filter(pk=value.pk).first()
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return queryset.filter(pk=int(value)).first()
    if isinstance(value, str):
        return queryset.filter(**{field: value.strip()}).first()
    return None


def _name(project: Project, model: type, value: Any, errors: dict[str, list[str]], exclude: Any = None) -> str:
    name = value.strip().lower() if isinstance(value, str) else ""
    if not NAME.match(name):
        errors["name"] = [_("Use lowercase letters, digits and '-', at most 100 characters.")]
    elif model.objects.filter(project=project, name=name).exclude(pk=getattr(exclude, "pk", None)).exists():
        errors["name"] = [_("This name is taken in this project.")]
    return name


def _number(values: dict[str, Any], field: str, low: float, high: float, errors: dict[str, list[str]]) -> Any:
    raw = values.get(field)
    try:
        if isinstance(raw, bool):
            raise ValueError
        number = float(raw)
    except (TypeError, ValueError):
        errors[field] = [_("Enter a number.")]
        return None
    if not low <= number <= high:
        errors[field] = [_("Between %(low)s and %(high)s.") % {"low": low, "high": high}]
    return number


# --- policies ------------------------------------------------------------------------------------------------------

POLICY_DEFAULTS: dict[str, Any] = {
    "mode": RetrainPolicy.Mode.FULL, "arguments": {}, "dataset_argument": "", "alias": "production",
    "metric": "test_accuracy", "higher_is_better": True, "margin": 0.0, "require_approval": False,
    "drift_monitor": None, "cooldown_minutes": 60, "enabled": True,
}  # fmt: skip
POLICY_FIELDS = ("name", "pipeline", "dataset", "registered_model", *POLICY_DEFAULTS)


def _nodes(pipeline: Pipeline | None) -> set[str]:
    return {node.get("name") for node in (pipeline.spec or {}).get("nodes", [])} if pipeline else set()


def clean_policy(project: Project, values: dict[str, Any], instance: RetrainPolicy | None = None) -> dict[str, Any]:
    """The policy's settings checked, errors keyed by field: its pipeline, dataset, registered model and drift monitor
    of this project (row, id or name), arguments naming the pipeline's nodes, a valid alias and margin."""
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {"name": _name(project, RetrainPolicy, values.get("name"), errors, instance)}
    for field, queryset in (
        ("pipeline", Pipeline.objects.filter(project=project)),
        ("dataset", Dataset.objects.filter(project=project)),
        ("registered_model", RegisteredModel.objects.filter(project=project)),
    ):
        out[field] = _pick(queryset, values.get(field))
        if out[field] is None:
            errors[field] = [_("No such %(what)s in this project.") % {"what": RetrainPolicy._meta.get_field(field)
                                                                          .verbose_name}]  # fmt: skip
    monitor = values.get("drift_monitor")
    out["drift_monitor"] = _pick(DriftMonitor.objects.filter(project=project), monitor, "service__name")
    if monitor not in (None, "") and out["drift_monitor"] is None:
        errors["drift_monitor"] = [_("No such drift monitor in this project (its id or its service's name).")]
    out["mode"] = values.get("mode") or RetrainPolicy.Mode.FULL
    if out["mode"] not in RetrainPolicy.Mode.values:
        errors["mode"] = [_("Choose full or incremental.")]
    nodes = _nodes(out["pipeline"])
    arguments = values.get("arguments") or {}
    if not isinstance(arguments, dict) or not all(isinstance(v, dict) for v in arguments.values()):
        errors["arguments"] = [_('An object of node names to objects of arguments: {"train": {"max_iter": 500}}.')]
    elif out["pipeline"] is not None and (unknown := sorted(set(arguments) - nodes)):
        errors["arguments"] = [_("No node %(names)s in the pipeline.") % {"names": ", ".join(unknown)}]
    out["arguments"] = arguments if isinstance(arguments, dict) else {}
    incremental = out["mode"] == RetrainPolicy.Mode.INCREMENTAL
    starts_from_champion = "{champion}" in str(arguments) or "{champion_version}" in str(arguments)
    if incremental and not starts_from_champion and "arguments" not in errors:
        errors["arguments"] = [
            _('Incremental training starts from the champion: pass "{champion}" or "{champion_version}" to a node.')
        ]
    target = (values.get("dataset_argument") or "").strip()
    if target and (target.count(".") != 1 or (out["pipeline"] is not None and target.split(".")[0] not in nodes)):
        errors["dataset_argument"] = [_("node.argument of a node of the pipeline, e.g. load.dataset.")]
    out["dataset_argument"] = target
    out["alias"] = (values.get("alias") or "").strip()
    try:
        validate_alias(out["alias"])
    except InvalidParameter as exc:
        errors["alias"] = [str(exc)]
    out["metric"] = (values.get("metric") or "").strip()
    if not out["metric"] or len(out["metric"]) > 250:
        errors["metric"] = [_("The name of a metric both runs log, e.g. test_accuracy.")]
    out["margin"] = _number(values, "margin", 0.0, 1e9, errors)
    cooldown = _number(values, "cooldown_minutes", 0, 7 * 24 * 60, errors)
    out["cooldown_minutes"] = int(cooldown) if cooldown is not None else None
    for flag in ("higher_is_better", "require_approval", "enabled"):
        out[flag] = bool(values.get(flag, POLICY_DEFAULTS[flag]))
    if errors:
        raise ValidationError(errors)
    return out


def create_policy(project: Project, user: Any, **values: Any) -> RetrainPolicy:
    """A retrain policy owned by `user` (the runs it starts are `user`'s, checked at each start)."""
    fields = clean_policy(project, {**POLICY_DEFAULTS, **values})
    try:
        with transaction.atomic():
            return RetrainPolicy.objects.create(project=project, created_by=user, **fields)
    except IntegrityError:
        raise ValidationError({"name": [_("This name is taken in this project.")]}) from None


def update_policy(policy: RetrainPolicy, **values: Any) -> RetrainPolicy:
    current = {field: getattr(policy, field) for field in POLICY_FIELDS}
    fields = clean_policy(policy.project, {**current, **values}, instance=policy)
    changed = [k for k, v in fields.items() if getattr(policy, k) != v]
    for key in changed:
        setattr(policy, key, fields[key])
    if changed:
        policy.save(update_fields=changed)
    return policy


def delete_policy(policy: RetrainPolicy) -> None:
    policy.delete()


# --- data monitors -------------------------------------------------------------------------------------------------

MONITOR_DEFAULTS: dict[str, Any] = {
    "min_changed_percent": 10.0, "drift_threshold": 0.2, "target_column": "", "interval_minutes": 0, "enabled": True,
}  # fmt: skip
MONITOR_FIELDS = ("name", "dataset", "policy", *MONITOR_DEFAULTS)


def clean_monitor(project: Project, values: dict[str, Any], instance: DataMonitor | None = None) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {"name": _name(project, DataMonitor, values.get("name"), errors, instance)}
    out["dataset"] = _pick(Dataset.objects.filter(project=project), values.get("dataset"))
    if out["dataset"] is None:
        errors["dataset"] = [_("No such dataset in this project.")]
    out["policy"] = _pick(RetrainPolicy.objects.filter(project=project), values.get("policy"))
    if out["policy"] is None:
        errors["policy"] = [_("No such retrain policy in this project.")]
    out["min_changed_percent"] = _number(values, "min_changed_percent", 0.0, 100.0, errors)
    out["drift_threshold"] = _number(values, "drift_threshold", 0.001, 100.0, errors)
    interval = _number(values, "interval_minutes", 0, 365 * 24 * 60, errors)
    out["interval_minutes"] = int(interval) if interval is not None else None
    target = values.get("target_column") or ""
    if not isinstance(target, str) or len(target) > 200:
        errors["target_column"] = [_("A column name of at most 200 characters.")]
    out["target_column"] = target.strip() if isinstance(target, str) else ""
    out["enabled"] = bool(values.get("enabled", True))
    if errors:
        raise ValidationError(errors)
    return out


def _schedule(monitor: DataMonitor, now: Any = None) -> None:
    interval = monitor.interval
    monitor.next_run_at = (now or timezone.now()) + interval if interval and monitor.enabled else None


def create_monitor(project: Project, user: Any, **values: Any) -> DataMonitor:
    fields = clean_monitor(project, {**MONITOR_DEFAULTS, **values})
    monitor = DataMonitor(project=project, created_by=user, **fields)
    _schedule(monitor)
    try:
        with transaction.atomic():
            monitor.save()
    except IntegrityError:
        raise ValidationError({"name": [_("This name is taken in this project.")]}) from None
    return monitor


def update_monitor(monitor: DataMonitor, **values: Any) -> DataMonitor:
    current = {field: getattr(monitor, field) for field in MONITOR_FIELDS}
    fields = clean_monitor(monitor.project, {**current, **values}, instance=monitor)
    changed = [k for k, v in fields.items() if getattr(monitor, k) != v]
    for key in changed:
        setattr(monitor, key, fields[key])
    if "interval_minutes" in changed or "enabled" in changed:
        _schedule(monitor)
        changed.append("next_run_at")
    if changed:
        monitor.save(update_fields=changed)
    return monitor


def delete_monitor(monitor: DataMonitor) -> None:
    monitor.delete()


def check_version(monitor: DataMonitor, version: DatasetVersion) -> DataCheck:
    """Compare `version` with the version before it; start the monitor's policy when its rows changed by at least
    `min_changed_percent` or a feature drifted. Once per (monitor, version): a second call returns the first check."""
    existing = DataCheck.objects.filter(monitor=monitor, version=version).first()
    if existing is not None:
        return existing
    previous = version.parent or version.dataset.versions.filter(number__lt=version.number).order_by("-number").first()
    check = DataCheck(monitor=monitor, version=version, previous=previous)
    if previous is None:
        check.message = _("The first version: nothing to compare with.")
    else:
        try:
            result = datachange.compare(previous, version, monitor.target_column)
        except datachange.NotComparable as exc:
            check.message = str(exc)
        else:
            check.changed_percent, check.features, check.score = (
                result["changed_percent"], result["features"], result["score"])  # fmt: skip
            check.drifted = sorted(n for n, f in check.features.items() if f["score"] >= monitor.drift_threshold)
            many = check.changed_percent >= monitor.min_changed_percent
            # a version the policy's own retraining wrote must not start it again (a loop)
            own = (
                version.pipeline_run_id is not None
                and monitor.policy.retrainings.filter(run_id=version.pipeline_run_id).exists()
            )
            check.triggered = monitor.enabled and not own and (many or bool(check.drifted))
            parts = [_("%(p).1f %% of rows changed") % {"p": check.changed_percent}]
            if check.drifted:
                parts.append(_("drifted: %(names)s") % {"names": ", ".join(check.drifted)})
            if own:
                parts.append(_("written by this policy's own retraining run"))
            check.message = "; ".join(parts) + "."
    try:
        with transaction.atomic():
            check.save()
    except IntegrityError:  # a concurrent check of the same version
        return DataCheck.objects.get(monitor=monitor, version=version)
    if check.drifted:
        from apps.retraining.tasks import announce

        enqueue(announce, "dataset_checked", check.pk)
    if check.triggered:
        start_policy(monitor.policy, Retraining.Reason.DATA, version=version, detail=f"{monitor.name}: {check.message}")
    return check


def claim_due(now: Any = None, limit: int = 50) -> list[int]:
    """Ids of enabled monitors with an interval whose time came, each claimed by one caller (a conditional UPDATE)."""
    now = now or timezone.now()
    claimed = []
    due = DataMonitor.objects.filter(enabled=True, interval_minutes__gt=0, next_run_at__lte=now)
    for pk, minutes in due.values_list("pk", "interval_minutes")[:limit]:
        moved = DataMonitor.objects.filter(pk=pk, next_run_at__lte=now).update(
            next_run_at=now + timedelta(minutes=minutes)
        )
        if moved:
            claimed.append(pk)
    return claimed


# --- starting a policy ---------------------------------------------------------------------------------------------


def _fill(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, text in values.items():
            value = value.replace(key, text)
    return value


def run_spec(policy: RetrainPolicy, version: DatasetVersion, reason: str = Retraining.Reason.MANUAL) -> dict[str, Any]:
    """The pipeline's spec with the policy's arguments in place (placeholders filled) and the new version in
    `dataset_argument`. `{champion}` names the alias (resolved when the task reads it, as the gate does);
    `{champion_version}` pins the version at the alias now, so that an incremental run starts from exactly the
    champion of its start even if the alias moves while it waits."""
    spec = copy.deepcopy(policy.pipeline.spec)
    model = policy.registered_model.name
    champion = (
        ModelAlias.objects.filter(registered_model=policy.registered_model, alias=policy.alias)
        .select_related("model_version")
        .first()
    )
    previous = version.dataset.versions.filter(number__lt=version.number).order_by("-number").first()
    values = {
        "{version}": version.ref,
        "{previous}": previous.ref if previous else "",
        "{champion}": f"models:/{model}@{policy.alias}" if champion else "",
        "{champion_version}": f"models:/{model}/{champion.model_version.version}" if champion else "",
        "{reason}": str(reason),
    }
    overrides = {node: dict(args) for node, args in (policy.arguments or {}).items()}
    if policy.dataset_argument:
        node, argument = policy.dataset_argument.split(".", 1)
        overrides.setdefault(node, {})[argument] = "{version}"
    for node in spec.get("nodes", []):
        for argument, value in overrides.get(node.get("name"), {}).items():
            node.setdefault("args", {})[argument] = _fill(value, values)
    return spec


def start_policy(
    policy: RetrainPolicy, reason: str, *, version: DatasetVersion | None = None, detail: str = "", now: Any = None
) -> Retraining:
    """Start a retraining run of `policy` as its owner, with `version` (default: the dataset's newest). Skipped (and
    recorded) while one still runs or within the cooldown of the last, except by hand; a refused start (the owner may
    no longer start runs, the spec no longer validates) is recorded as failed."""
    now = now or timezone.now()
    with transaction.atomic():
        RetrainPolicy.objects.select_for_update().filter(pk=policy.pk).first()  # one start of a policy at a time
        retraining = Retraining(project_id=policy.project_id, policy=policy, reason=reason, detail=detail[:500],
                                created_at=now)  # fmt: skip
        retraining.dataset_version = version or policy.dataset.versions.order_by("-number").first()
        last = policy.retrainings.exclude(run=None).order_by("-created_at").first()
        if reason != Retraining.Reason.MANUAL and not policy.enabled:
            retraining.status, retraining.message = Retraining.Status.SKIPPED, _("The policy is disabled.")
        elif last is not None and last.status == Retraining.Status.RUNNING and not last.run.is_finished:
            retraining.status = Retraining.Status.SKIPPED
            retraining.message = _("Retraining run %(run)s is still going.") % {"run": last.run}
        elif (
            reason != Retraining.Reason.MANUAL
            and last is not None
            and (last.created_at > now - timedelta(minutes=policy.cooldown_minutes))
        ):
            retraining.status = Retraining.Status.SKIPPED
            retraining.message = _("Within the cooldown of %(n)d minutes since the last retraining.") % {
                "n": policy.cooldown_minutes}  # fmt: skip
        elif retraining.dataset_version is None:
            retraining.status, retraining.message = Retraining.Status.FAILED, _("The dataset has no version yet.")
        elif policy.created_by is None:
            retraining.status, retraining.message = Retraining.Status.FAILED, _("The policy has no owner to run as.")
        else:
            try:
                with transaction.atomic():
                    retraining.run = start_spec_run(
                        policy.project, policy.created_by, run_spec(policy, retraining.dataset_version, reason),
                        name=policy.pipeline.name, pipeline=policy.pipeline, trigger="retrain",
                    )  # fmt: skip
            except PermissionDenied as exc:
                retraining.status = Retraining.Status.FAILED
                retraining.message = _("The policy's owner may not start runs here: %(e)s") % {"e": exc}
            except ValidationError as exc:
                retraining.status = Retraining.Status.FAILED
                retraining.message = "; ".join(exc.messages)
            else:
                retraining.message = _("Started %(run)s with %(ref)s.") % {
                    "run": retraining.run, "ref": retraining.dataset_version.ref}  # fmt: skip
        retraining.save()
    logger.info("retrain policy %s: %s (%s)", policy.pk, retraining.status, retraining.message)
    return retraining
