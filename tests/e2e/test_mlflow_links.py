"""The links the MLflow client prints (`<tracking URI>/#/experiments/<id>/runs/<run id>`) open the run's page in a
real browser, also for a visitor who has to log in first; an experiment link opens the experiment's runs table.
Screenshots: test-results/e2e/<test>-<step>.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.threads import elsewhere
from tests.factories import PASSWORD, tracking_run

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_printed_run_link_opens_the_run_page_after_logging_in(browsing, world):
    run = elsewhere(lambda: tracking_run(world.project_a, world.alice, name="printed-run", experiment_name="links"))
    b = browsing
    b.goto(f"/#/experiments/{run.experiment_id}/runs/{run.run_uuid}")
    expect(b.page).to_have_url(re.compile(r"/accounts/login/\?next=/mlflow-ui/"))
    b.page.fill("input[name=username]", "alice")
    b.page.fill("input[name=password]", PASSWORD)
    b.page.click("button[type=submit]")
    expect(b.page).to_have_url(re.compile(rf"/p/project-a/tracking-runs/{run.pk}/$"))
    expect(b.page.get_by_role("heading", name="printed-run")).to_be_visible()
    b.screenshot("run")

    b.goto(f"/#/experiments/{run.experiment_id}")
    expect(b.page).to_have_url(re.compile(rf"/p/project-a/experiments/{run.experiment_id}/$"))
    b.goto(f"/#/experiments/{run.experiment_id}/runs/{run.run_uuid}/artifacts")
    expect(b.page).to_have_url(re.compile(rf"/p/project-a/tracking-runs/{run.pk}/$"))
    b.goto("/#/projects")  # not an MLflow object link: the home page stays
    expect(b.page).to_have_url(re.compile(r"/#/projects$"))
    b.assert_clean()
