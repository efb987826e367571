"""The study page is live: a member's websocket on the project's events (ws/projects/<slug>/events/, served by
uvicorn through the real channel layer) hears the study each time a driver pass changed it (trials started, a trial
ended, the study completed), and the page's live part it then re-fetches shows the new state. Quiet passes say
nothing; another tenant's socket is refused (tests/projects/test_events_ws.py covers the socket's own rules)."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.hpo import driver
from apps.hpo.models import Trial
from apps.jobs.models import RunStatus
from apps.models.models import LatestMetric
from tests import factories
from tests.hpo.factories import study as make_study
from tests.projects.test_events_ws import assert_quiet, close_code, joined, open_socket, receive

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def finish_trial(trial: Trial, accuracy: float, owner) -> None:
    """What a trial's task does: its tracking run logs the metric, then its run succeeds."""
    run = factories.tracking_run(trial.study.project, owner)
    run.source_pipeline_run = trial.run
    run.save()
    LatestMetric.objects.create(run=run, key="val_accuracy", value=accuracy, timestamp=1, step=1)
    trial.run.status = RunStatus.SUCCEEDED
    trial.run.save()


def page_of(user, url: str) -> str:
    """The study page as live.js fetches it when an event concerns it (its #study-live part is swapped in)."""
    client = Client()
    client.force_login(user)
    response = client.get(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


def test_a_member_hears_the_study_as_its_trials_start_and_finish(live_asgi, world):
    study = make_study(world.project_a, world.alice, budget={"max_trials": 2, "parallel_trials": 2})
    page = f"/p/project-a/studies/{study.pk}/"
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        driver.advance_study(study.pk)  # two trials start
        assert receive(ws) == {"type": "study", "id": study.pk, "status": "running"}

        driver.advance_study(study.pk)  # nothing ended: nothing is said
        assert_quiet(ws)

        first, second = study.trials.select_related("run", "study__project").order_by("number")
        finish_trial(first, 0.93, world.alice)
        driver.advance_study(study.pk)
        assert receive(ws) == {"type": "study", "id": study.pk, "status": "running"}
        fragment = page_of(world.bob, page)
        assert f'id="study-live" data-live="study:{study.pk}"' in fragment
        assert "0.9300" in fragment  # what the page swaps in: trial 0 complete, with its value

        finish_trial(second, 0.97, world.alice)
        driver.advance_study(study.pk)
        assert receive(ws) == {"type": "study", "id": study.pk, "status": "completed"}
    assert list(study.trials.order_by("number").values_list("status", flat=True)) == ["complete", "complete"]
    assert "#1: 0.97" in page_of(world.bob, page)  # the best trial


def test_another_tenant_cannot_follow_the_study(live_asgi, world):
    make_study(world.project_a, world.alice)
    with open_socket(live_asgi, user=world.charlie) as ws:
        assert close_code(ws) == 4404
