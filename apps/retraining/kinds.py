"""Alert rule kinds of continuous training, registered into the alerts app's registry from `AppConfig.ready()`: a
dataset version that drifted from the one before it, and a promotion decision (so an approval waiting in the inbox
reaches the admins)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.alerts.kinds import KINDS, Clear, Finding, Param, RuleKind, register

DATASET = Param(
    "dataset", gettext_lazy("dataset"), "text", required=False, help=gettext_lazy("Its name; empty: every dataset.")
)


class DatasetDrift(RuleKind):
    """Announces each checked dataset version with a feature that drifted from the previous version (once)."""

    name = "dataset_drift"
    label = gettext_lazy("Dataset version drifted")
    description = gettext_lazy(
        "A new version of a watched dataset whose feature distributions moved (PSI at or above the data monitor's "
        "threshold) against the previous version."
    )
    params = (DATASET,)
    events = ("dataset_checked",)

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        check = obj
        dataset = check.version.dataset
        if not check.drifted or rule.params.get("dataset") not in (None, "", dataset.name):
            return []
        message = _("Dataset %(ref)s drifted from %(previous)s: %(features)s (largest PSI %(score).3f).") % {
            "ref": check.version.ref, "previous": check.previous.ref if check.previous_id else "-",
            "features": ", ".join(check.drifted), "score": check.score or 0,
        }  # fmt: skip
        project = check.monitor.project.slug
        url = reverse("retraining:monitor-detail", kwargs={"project": project, "pk": check.monitor_id})
        subject = _("drift of dataset %(name)s") % {"name": dataset.name}
        return [Finding(f"datacheck:{check.pk}", subject, message, check.score, url, instant=True)]


class PromotionDecided(RuleKind):
    """Announces each champion/challenger decision (once), pending approvals included."""

    name = "promotion_decision"
    label = gettext_lazy("Retrained model decided")
    description = gettext_lazy("A retrained model version was promoted, rejected, or waits for a project admin.")
    events = ("promotion_decided",)

    def on_event(self, rule: Any, event: str, obj: Any) -> list[Finding | Clear]:
        decision = obj
        message = _("%(model)s v%(version)s: %(outcome)s (%(metric)s %(new)s against %(old)s).") % {
            "model": decision.registered_model.name, "version": decision.challenger.version,
            "outcome": decision.get_outcome_display(), "metric": decision.metric,
            "new": _fmt(decision.challenger_value), "old": _fmt(decision.champion_value),
        }  # fmt: skip
        url = reverse("retraining:decision-list", kwargs={"project": decision.project.slug})
        subject = _("retraining of %(model)s") % {"model": decision.registered_model.name}
        key = f"decision:{decision.pk}:{decision.outcome}"
        return [Finding(key, subject, message, decision.challenger_value, url, instant=True)]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def register_kind() -> None:
    """Called from `RetrainingConfig.ready()` (idempotent)."""
    for kind in (DatasetDrift, PromotionDecided):
        if kind.name not in KINDS:
            register(kind)
