"""The champion/challenger gate: what a retraining registered is compared with the version at the policy's alias on
the policy's metric, then promoted, rejected or left pending for a project admin. The challenger's value is the latest
one its tracking run logged. The champion's is, preferably, `champion_<metric>` on the challenger's run (the evaluate
step scored the champion on the same test split, inside the task's sandbox), else the value the champion's own run
logged on its own split; the decision says which (`basis`). Promotions keep the version the alias left, and roll back
to it in one click; services following the alias roll with it (apps/serving/signals.py hears the alias move)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.jobs.models import PipelineRun, RunStatus
from apps.models.models import LatestMetric, ModelAlias, ModelVersion
from apps.models.registry import set_alias
from apps.outbox.services import enqueue
from apps.projects.permissions import CHANGE, CONTRIBUTE, has_project_perm
from apps.retraining.models import PromotionDecision, Retraining, RetrainPolicy
from portal.lib.errors import Conflict

Outcome = PromotionDecision.Outcome


def metric_of(version: ModelVersion | None, key: str) -> float | None:
    """The latest value of `key` that the version's tracking run logged (None without a run or the metric)."""
    if version is None or version.run_id is None:
        return None
    row = LatestMetric.objects.filter(run_id=version.run_id, key=key, is_nan=False).first()
    return row.value if row is not None else None


# What the evaluate task (apps/jobs/builtin_tasks/evaluate.py, CHAMPION_PREFIX) logs the champion's scores under.
CHAMPION_PREFIX = "champion_"
Basis = PromotionDecision.Basis


def champion_value(challenger: ModelVersion, champion: ModelVersion | None, key: str) -> tuple[float | None, str, str]:
    """(the champion's value of `key`, its basis, a note for the message). The same-split value the challenger's run
    logged as champion_<key> counts only when it scored this champion: a `champion_version` that names another
    version (the alias moved during the run) sends the gate back to the champion's own value."""
    if champion is None:
        return None, "", ""
    same_split = metric_of(challenger, CHAMPION_PREFIX + key)
    scored = metric_of(challenger, CHAMPION_PREFIX + "version")
    note = ""
    if same_split is not None and (scored is None or int(scored) == champion.version):
        return same_split, Basis.SAME_SPLIT, note
    if same_split is not None:
        note = _("The challenger's run scored v%(scored)s, not the champion v%(champion)s.") % {
            "scored": int(scored), "champion": champion.version}  # fmt: skip
    own = metric_of(champion, key)
    return own, (Basis.OWN_RUN if own is not None else ""), note


def champion_of(policy: RetrainPolicy) -> ModelVersion | None:
    row = ModelAlias.objects.filter(registered_model=policy.registered_model, alias=policy.alias).first()
    return row.model_version if row is not None else None


def _announce(decision: PromotionDecision) -> None:
    from apps.retraining.tasks import announce

    enqueue(announce, "promotion_decided", decision.pk)


def judge_run(run: PipelineRun) -> PromotionDecision | None:
    """A retraining's run ended: failed runs fail the retraining; a succeeded one's registered version goes to the
    gate. Safe twice (the decision is made once)."""
    retraining = Retraining.objects.select_related("policy__registered_model").filter(run=run).first()
    if retraining is None or retraining.status in (Retraining.Status.DECIDED, Retraining.Status.FAILED):
        return retraining.decisions.first() if retraining is not None else None
    if run.status != RunStatus.SUCCEEDED:
        retraining.status = Retraining.Status.FAILED
        retraining.message = _("Run %(run)s ended %(status)s. %(reason)s") % {
            "run": run, "status": run.get_status_display(), "reason": run.reason}  # fmt: skip
        retraining.save(update_fields=["status", "message"])
        return None
    policy = retraining.policy
    challenger = (
        ModelVersion.objects.filter(registered_model=policy.registered_model, run__source_pipeline_run=run)
        .order_by("-version")
        .first()
    )
    if challenger is None:
        retraining.status = Retraining.Status.FAILED
        retraining.message = _("Run %(run)s registered no version of %(model)s.") % {
            "run": run, "model": policy.registered_model.name}  # fmt: skip
        retraining.save(update_fields=["status", "message"])
        return None
    return decide(policy, challenger, retraining=retraining)


def decide(
    policy: RetrainPolicy, challenger: ModelVersion, *, retraining: Retraining | None = None, now: Any = None
) -> PromotionDecision:
    """Compare `challenger` with the champion (the version at the policy's alias; its value on the challenger's split
    when the challenger's run scored it, else its own run's: `champion_value`) and record the outcome: promoted
    (the alias moves now) when better by more than the margin, pending when better and the policy requires approval,
    rejected otherwise. Without a champion, or a champion without the metric, the challenger counts as better."""
    now = now or timezone.now()
    with transaction.atomic():
        RetrainPolicy.objects.select_for_update().filter(pk=policy.pk).first()
        existing = PromotionDecision.objects.filter(policy=policy, challenger=challenger).first()
        if existing is not None:
            return existing
        champion = champion_of(policy)
        old_value, basis, note = champion_value(challenger, champion, policy.metric)
        decision = PromotionDecision(
            project_id=policy.project_id, policy=policy, retraining=retraining,
            registered_model_id=policy.registered_model_id, alias=policy.alias, challenger=challenger,
            champion=champion, metric=policy.metric, margin=policy.margin, created_at=now,
            challenger_value=metric_of(challenger, policy.metric), champion_value=old_value, basis=basis,
        )  # fmt: skip
        values = {"metric": policy.metric, "new": decision.challenger_value, "old": decision.champion_value,
                  "margin": policy.margin}  # fmt: skip
        if champion is not None and champion.pk == challenger.pk:
            decision.outcome, decision.message = Outcome.REJECTED, _("The challenger is already the champion.")
        elif decision.challenger_value is None:
            decision.outcome = Outcome.REJECTED
            decision.message = _("The challenger's run logged no %(metric)s.") % values
        elif champion is None or decision.champion_value is None:  # nothing to compare with
            better = True
            decision.message = (
                _("No champion at alias %(alias)s yet.") % {"alias": policy.alias} if champion is None
                else _("The champion's run logged no %(metric)s.") % values
            )  # fmt: skip
        else:
            better = policy.better(decision.challenger_value, decision.champion_value)
            word = _("better") if better else _("not better")
            decision.message = _("%(metric)s %(new).4f against %(old).4f: %(word)s by more than %(margin)s.") % {
                **values, "word": word}  # fmt: skip
            decision.message += " " + (
                _("Both scored on the challenger's test split.") if basis == Basis.SAME_SPLIT
                else _("Each scored on its own test split.")
            )  # fmt: skip
            if not better:
                decision.outcome = Outcome.REJECTED
        if note:
            decision.message += " " + note
        if not decision.outcome:
            if policy.require_approval:
                decision.outcome = Outcome.PENDING
            else:
                decision.outcome, decision.decided_at = Outcome.PROMOTED, now
                decision.previous = champion
                set_alias(policy.registered_model, policy.alias, challenger.version)
        if decision.outcome == Outcome.REJECTED:
            decision.decided_at = now
        decision.save()
        if retraining is not None:
            retraining.status = Retraining.Status.DECIDED
            retraining.save(update_fields=["status"])
        _announce(decision)
    return decision


def _locked(decision: PromotionDecision) -> PromotionDecision:
    return (
        PromotionDecision.objects.select_for_update()
        .select_related("registered_model", "challenger")
        .get(pk=decision.pk)
    )


def approve(decision: PromotionDecision, user: Any) -> PromotionDecision:
    """A project admin promotes a pending challenger: the alias moves to it (the version it left is kept)."""
    if not has_project_perm(user, decision.project, CHANGE):
        raise PermissionDenied(_("Only a project admin may approve a promotion."))
    with transaction.atomic():
        decision = _locked(decision)
        if decision.outcome != Outcome.PENDING:
            raise Conflict(_("This decision is %(o)s, not waiting.") % {"o": decision.get_outcome_display()})
        decision.previous = ModelVersion.objects.filter(
            aliases__registered_model=decision.registered_model, aliases__alias=decision.alias
        ).first()
        set_alias(decision.registered_model, decision.alias, decision.challenger.version)
        decision.outcome, decision.decided_by, decision.decided_at = Outcome.APPROVED, user, timezone.now()
        decision.save(update_fields=["previous", "outcome", "decided_by", "decided_at"])
        _announce(decision)
    return decision


def reject(decision: PromotionDecision, user: Any) -> PromotionDecision:
    """A project admin turns a pending challenger down: the alias stays where it is."""
    if not has_project_perm(user, decision.project, CHANGE):
        raise PermissionDenied(_("Only a project admin may reject a promotion."))
    with transaction.atomic():
        decision = _locked(decision)
        if decision.outcome != Outcome.PENDING:
            raise Conflict(_("This decision is %(o)s, not waiting.") % {"o": decision.get_outcome_display()})
        decision.outcome, decision.decided_by, decision.decided_at = Outcome.REJECTED, user, timezone.now()
        decision.save(update_fields=["outcome", "decided_by", "decided_at"])
        _announce(decision)
    return decision


def roll_back(decision: PromotionDecision, user: Any) -> PromotionDecision:
    """Move the alias back to the version this promotion replaced (the services following it roll back too). Only
    while the alias still points at the promoted version: a later promotion is rolled back first."""
    if not has_project_perm(user, decision.project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow rolling back."))
    with transaction.atomic():
        decision = _locked(decision)
        if not decision.can_roll_back:
            raise Conflict(_("Only a promotion that replaced a version, and was not rolled back, can be rolled back."))
        current = ModelAlias.objects.filter(registered_model=decision.registered_model, alias=decision.alias).first()
        if current is None or current.model_version_id != decision.challenger_id:
            raise Conflict(_("Alias %(alias)s has moved since this promotion.") % {"alias": decision.alias})
        set_alias(decision.registered_model, decision.alias, decision.previous.version)
        decision.rolled_back_at, decision.rolled_back_by = timezone.now(), user
        decision.save(update_fields=["rolled_back_at", "rolled_back_by"])
    return decision
