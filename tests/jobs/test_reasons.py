"""Reasons read in the viewer's language (issue 26.11): what the orchestrator, dispatcher, admission checks and
agent store in English is shown translated from the shape that made it, values included; anything else as stored."""

from __future__ import annotations

import pytest
from django.utils import translation

from apps.jobs import reasons as _formats  # noqa: F401  (registers the shapes)
from portal.lib import reasons


@pytest.mark.parametrize(
    ("stored", "chinese"),
    [
        ("exited with code 3", "退出码 3"),
        ("train: exited with code 1", "train：退出码 1"),
        ("replica worker-1 killed by signal 9", "副本 worker-1 被信号 9 终止"),
        ("retry 1/2 after 10 s backoff (exited with code 1)", "10 秒退避后重试 1/2（退出码 1）"),
        ("waiting for 2 GPUs — quota 1/1 in use", "等待 2 GPUs — 配额已用 1/1"),
        ("waiting for the scheduler", "等待调度"),
    ],
)
def test_a_stored_reason_reads_in_chinese(stored, chinese):
    with translation.override("zh-hans"):
        assert reasons.translate(stored) == chinese
    with translation.override("en"):
        assert reasons.translate(stored) == stored


def test_a_sentence_no_shape_made_is_shown_as_stored():
    with translation.override("zh-hans"):
        assert reasons.translate("Back-off pulling image x:1") == "Back-off pulling image x:1"
        assert reasons.translate("") == ""


def test_the_shapes_are_what_the_code_writes():
    """The agent's and dispatcher's f-strings and the admission's messages must keep these shapes (a reworded
    sentence would silently stay English)."""
    from pathlib import Path

    from django.conf import settings

    base = Path(settings.BASE_DIR)
    agent = (base / "apps/runtime/local/agent.py").read_text()
    dispatcher = (base / "apps/jobs/dispatcher.py").read_text()
    orchestrator = (base / "apps/jobs/orchestrator.py").read_text()
    assert 'f"exited with code {code}"' in agent
    assert 'f"killed by signal {-code}"' in agent
    assert 'f"replica {bad[0].name} {reason}"' in agent
    assert 'f"timeout: still running after {workload.timeout} s"' in agent
    assert 'f"waiting for a slot — pipeline parallelism {per_run[run.pk]}/{parallelism} in use"' in dispatcher
    assert 'f"retry {failures}/{retries} after {backoff:g} s backoff ({task.reason})"' in orchestrator
    assert 'f"upstream {bad[0]} failed"' in orchestrator
