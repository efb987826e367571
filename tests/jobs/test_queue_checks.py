"""The queue's settings are checked at startup (apps/jobs/checks.py): an unknown policy or a malformed number is an
error that names what is allowed, not a queue that silently falls back to the default."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks


def queue_errors() -> list:
    return [e for e in run_checks() if e.id.startswith("jobs.")]


def test_the_default_settings_pass():
    assert queue_errors() == []


@pytest.mark.parametrize("policy", ["backfill", "greedy"])
def test_each_known_policy_passes(settings, policy):
    settings.PORTAL_QUEUE_POLICY = policy
    assert queue_errors() == []


def test_an_unknown_policy_is_an_error_naming_the_valid_ones(settings):
    settings.PORTAL_QUEUE_POLICY = "fastest"
    [error] = queue_errors()
    assert error.id == "jobs.E001"
    assert error.msg == "PORTAL_QUEUE_POLICY must be one of 'backfill', 'greedy'; got 'fastest'."


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PORTAL_QUEUE_AGING_SECONDS", -1),
        ("PORTAL_QUEUE_AGING_MAX", -2),
        ("PORTAL_QUEUE_AGING_MAX", "3"),
        ("PORTAL_QUEUE_DEFAULT_ESTIMATE", 0),
        ("PORTAL_QUEUE_DEFAULT_ESTIMATE", 1.5),
        ("PORTAL_QUEUE_DEFAULT_ESTIMATE", None),
    ],
)
def test_a_malformed_number_is_an_error_naming_the_setting(settings, name, value):
    setattr(settings, name, value)
    [error] = queue_errors()
    assert error.id == "jobs.E002"
    assert error.msg.startswith(f"{name} must be a whole number of at least")


def test_aging_may_be_switched_off(settings):
    settings.PORTAL_QUEUE_AGING_SECONDS = 0
    settings.PORTAL_QUEUE_AGING_MAX = 0
    assert queue_errors() == []


@pytest.mark.parametrize("value", ["no", 0, None])
def test_fair_share_is_true_or_false(settings, value):
    settings.PORTAL_QUEUE_FAIR_SHARE = value
    [error] = queue_errors()
    assert (error.id, error.msg) == ("jobs.E004", "PORTAL_QUEUE_FAIR_SHARE must be True or False.")
