"""apps/jobs/templatetags/jobs_tags.py: durations in the viewer's language."""

from __future__ import annotations

from datetime import timedelta

from django.utils import translation

from apps.jobs.templatetags.jobs_tags import seconds


def test_durations_read_naturally_at_every_scale():
    assert seconds(12.34) == "12.3 s"
    assert seconds(timedelta(milliseconds=111)) == "0.1 s"  # an MLflow run's duration
    assert seconds(125) == "2 min 5 s"
    assert seconds(7300) == "2 h 1 min"
    assert seconds(None) == "—"
    assert seconds("soon") == "—"


def test_durations_are_translated():
    with translation.override("zh-hans"):
        assert seconds(125) != "2 min 5 s"
        assert "2" in seconds(125)
        assert "5" in seconds(125)
