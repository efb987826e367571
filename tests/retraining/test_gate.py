"""The champion/challenger gate: promotes only above the margin, waits for a project admin when the policy says so,
leaves the alias on rejection, and rolls a promotion back (the service following the alias rolls with it)."""

from __future__ import annotations

import time

import pytest
from django.core.exceptions import PermissionDenied

from apps.models import metrics as metric_store
from apps.models.models import ModelAlias
from apps.models.registry import set_alias
from apps.models.services import log_batch
from apps.retraining import gate
from apps.retraining.models import PromotionDecision
from apps.serving.services import create_service
from portal.lib.errors import Conflict
from tests.retraining.factories import champion, policy, version_with
from tests.serving.factories import artifact_store, eager_celery, heartbeat_agent, make_ready  # noqa: F401

pytestmark = pytest.mark.django_db

Outcome = PromotionDecision.Outcome


def alias_version(model, alias: str = "production") -> int:
    return ModelAlias.objects.get(registered_model=model, alias=alias).model_version.version


def test_it_promotes_only_when_better_by_more_than_the_margin(world):
    project, alice = world.project_a, world.alice
    old = champion(project, alice, 0.90)
    rule = policy(project, alice, margin=0.05)

    close = gate.decide(rule, version_with(project, alice, 0.93))
    assert (close.outcome, close.champion, close.champion_value, close.challenger_value) == (
        Outcome.REJECTED, old, 0.90, 0.93)  # fmt: skip
    assert "not better" in close.message
    assert alias_version(old.registered_model) == old.version

    better = version_with(project, alice, 0.96)
    decision = gate.decide(rule, better)
    assert (decision.outcome, decision.previous, decision.challenger_value) == (Outcome.PROMOTED, old, 0.96)
    assert alias_version(old.registered_model) == better.version
    assert gate.decide(rule, better) == decision  # once per challenger


def also_logged(version, **metrics: float) -> None:
    """More metrics on the version's tracking run (what the evaluate step logs about the champion)."""
    stamp = int(time.time() * 1000)
    log_batch(version.run, metrics=[metric_store.Point(key, value, stamp, 0, False) for key, value in metrics.items()])


def test_it_compares_on_the_challengers_split_when_its_run_scored_the_champion(world):
    project, alice = world.project_a, world.alice
    old = champion(project, alice, 0.97)  # on its own (older, easier) split
    rule = policy(project, alice, margin=0.0)
    new = version_with(project, alice, 0.93)
    also_logged(new, champion_test_accuracy=0.90, champion_version=old.version)  # the same rows as the 0.93

    decision = gate.decide(rule, new)

    assert (decision.outcome, decision.basis) == (Outcome.PROMOTED, PromotionDecision.Basis.SAME_SPLIT)
    assert (decision.champion, decision.champion_value, decision.challenger_value) == (old, 0.90, 0.93)
    assert decision.message == (
        "test_accuracy 0.9300 against 0.9000: better by more than 0.0. Both scored on the challenger's test split."
    )


def test_without_a_same_split_score_it_falls_back_to_the_champions_own_run_and_says_so(world):
    project, alice = world.project_a, world.alice
    old = champion(project, alice, 0.97)
    rule = policy(project, alice, margin=0.0)

    decision = gate.decide(rule, version_with(project, alice, 0.93))

    assert (decision.outcome, decision.basis, decision.champion_value) == (
        Outcome.REJECTED, PromotionDecision.Basis.OWN_RUN, 0.97)  # fmt: skip
    assert decision.message.endswith("Each scored on its own test split.")
    assert decision.get_basis_display() == "champion's own evaluation"
    assert alias_version(old.registered_model) == old.version


def test_a_same_split_score_of_another_version_than_the_champion_is_not_used(world):
    project, alice = world.project_a, world.alice
    first = champion(project, alice, 0.50)
    old = champion(project, alice, 0.97)  # the alias moved while the challenger's run was going
    rule = policy(project, alice, margin=0.0)
    new = version_with(project, alice, 0.93)
    also_logged(new, champion_test_accuracy=0.40, champion_version=first.version)

    decision = gate.decide(rule, new)

    assert (decision.basis, decision.champion, decision.champion_value) == (
        PromotionDecision.Basis.OWN_RUN, old, 0.97)  # fmt: skip
    assert decision.outcome == Outcome.REJECTED
    assert f"The challenger's run scored v{first.version}, not the champion v{old.version}." in decision.message


def test_a_champion_without_any_value_leaves_the_basis_empty(world):
    project, alice = world.project_a, world.alice
    silent = version_with(project, alice, None)
    set_alias(silent.registered_model, "production", silent.version)
    decision = gate.decide(policy(project, alice), version_with(project, alice, 0.5))
    assert (decision.outcome, decision.basis, decision.champion_value) == (Outcome.PROMOTED, "", None)
    assert "logged no test_accuracy" in decision.message


def test_lower_is_better_reads_the_metric_the_other_way(world):
    project, alice = world.project_a, world.alice
    champion(project, alice, 0.30)
    rule = policy(project, alice, metric="test_accuracy", higher_is_better=False, margin=0.0)
    assert gate.decide(rule, version_with(project, alice, 0.35)).outcome == Outcome.REJECTED
    assert gate.decide(rule, version_with(project, alice, 0.20)).outcome == Outcome.PROMOTED


def test_a_challenger_without_the_metric_is_rejected_and_without_a_champion_it_wins(world):
    project, alice = world.project_a, world.alice
    rule = policy(project, alice)
    first = gate.decide(rule, version_with(project, alice, 0.5))
    assert (first.outcome, first.champion, first.previous) == (Outcome.PROMOTED, None, None)
    assert not first.can_roll_back  # nothing to go back to
    silent = gate.decide(rule, version_with(project, alice, None))
    assert silent.outcome == Outcome.REJECTED
    assert "logged no test_accuracy" in silent.message


def test_approval_blocks_the_promotion_until_a_project_admin_approves(world):
    project, alice, bob = world.project_a, world.alice, world.bob  # bob is an editor
    old = champion(project, alice, 0.80)
    rule = policy(project, alice, require_approval=True, margin=0.0)
    new = version_with(project, alice, 0.95)

    decision = gate.decide(rule, new)
    assert (decision.outcome, decision.champion_value, decision.challenger_value) == (Outcome.PENDING, 0.80, 0.95)
    assert alias_version(old.registered_model) == old.version  # blocked
    with pytest.raises(PermissionDenied):
        gate.approve(decision, bob)
    assert alias_version(old.registered_model) == old.version

    approved = gate.approve(decision, alice)
    assert (approved.outcome, approved.decided_by, approved.previous) == (Outcome.APPROVED, alice, old)
    assert alias_version(old.registered_model) == new.version
    with pytest.raises(Conflict):
        gate.approve(approved, alice)  # decided once


def test_a_worse_challenger_is_rejected_even_when_approval_is_required(world):
    project, alice = world.project_a, world.alice
    champion(project, alice, 0.9)
    rule = policy(project, alice, require_approval=True)
    assert gate.decide(rule, version_with(project, alice, 0.7)).outcome == Outcome.REJECTED


def test_rejection_leaves_the_alias_where_it_was(world):
    project, alice = world.project_a, world.alice
    old = champion(project, alice, 0.80)
    rule = policy(project, alice, require_approval=True, margin=0.0)
    decision = gate.decide(rule, version_with(project, alice, 0.99))

    with pytest.raises(PermissionDenied):
        gate.reject(decision, world.bob)
    rejected = gate.reject(decision, alice)

    assert (rejected.outcome, rejected.decided_by) == (Outcome.REJECTED, alice)
    assert alias_version(old.registered_model) == old.version
    assert not rejected.can_roll_back


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_celery", "artifact_store")
def test_rollback_restores_the_previous_version_on_the_following_service(world):
    project, alice = world.project_a, world.alice
    heartbeat_agent()
    old = champion(project, alice, 0.80)
    service = create_service(project, alice, name="iris", registered_model=old.registered_model,
                             follow_alias="production")  # fmt: skip
    make_ready(service.revisions.get())
    rule = policy(project, alice, margin=0.0)
    new = version_with(project, alice, 0.95)

    decision = gate.decide(rule, new)
    assert decision.outcome == Outcome.PROMOTED
    assert service.revisions.order_by("-number").first().model_version == new  # the service followed
    make_ready(service.revisions.order_by("-number").first())

    with pytest.raises(PermissionDenied):
        gate.roll_back(decision, world.charlie)
    rolled = gate.roll_back(decision, world.bob)  # an editor may roll back

    assert rolled.rolled_back_by == world.bob
    assert rolled.rolled_back_at is not None
    assert alias_version(old.registered_model) == old.version
    assert service.revisions.order_by("-number").first().model_version == old
    with pytest.raises(Conflict):
        gate.roll_back(rolled, alice)  # once


def test_each_decision_is_announced_once_with_both_metrics(world):
    from apps.alerts.models import AlertEvent
    from apps.retraining.tasks import announce
    from tests.alerts.factories import channel, rule

    project, alice = world.project_a, world.alice
    rule(project, alice, "promotion_decision", channels=[channel(project, alice)], name="decisions")
    champion(project, alice, 0.8)
    decision = gate.decide(policy(project, alice, require_approval=True, margin=0.0), version_with(project, alice, 0.9))

    announce("promotion_decided", decision.pk)
    announce("promotion_decided", decision.pk)
    gate.approve(decision, alice)
    announce("promotion_decided", decision.pk)

    messages = list(AlertEvent.objects.filter(rule__name="decisions").order_by("pk").values_list("message", flat=True))
    assert messages == [
        "iris-classifier v2: Waiting for approval (test_accuracy 0.9000 against 0.8000).",
        "iris-classifier v2: Approved (test_accuracy 0.9000 against 0.8000).",
    ]
