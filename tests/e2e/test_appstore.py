"""The app store's first acceptance point in a real browser: the catalogue lists the built-in apps, "Tabular
classification" installs into a project through its parameter form, Run trains, evaluates and registers the model
(a real local agent), the service that follows the alias becomes ready (a real model server), and the "Try it" form
answers with a prediction.

Each step saves a numbered screenshot, test-results/e2e/test_the_tabular_app_from_catalogue_to_try_it-<NN>-<step>.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.appstore.models import Installation
from apps.appstore.services import sync_builtin_apps
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import PipelineRun
from apps.serving.models import InferenceService
from tests.e2e.test_journey import Journey
from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.serving.factories import artifact_store  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

RUN_SECONDS = 300  # five tasks, each a Python process importing scikit-learn, on a loaded machine
SERVE_SECONDS = 180  # the model server's replica starts and passes its readiness probe
BUILTIN_TITLES = ["Tabular classification", "Regression", "Anomaly detection", "Time-series forecasting"]


@pytest.mark.usefixtures("artifact_store")
def test_the_tabular_app_from_catalogue_to_try_it(browsing, live_agent, live_workers):
    load_builtin_templates()  # what `migrate` does on a clean machine
    sync_builtin_apps()
    owner = UserFactory(username="newcomer")
    project = ProjectFactory(owner=owner, slug="demo", name="Demo")
    b = browsing
    page = b.page
    step = Journey(b).step

    with step("log in"):
        b.log_in("newcomer", PASSWORD)

    with step("catalogue"):
        b.goto("/apps/")
        for title in BUILTIN_TITLES:
            expect(page.get_by_role("link", name=title, exact=True)).to_be_visible()
        expect(page.get_by_role("link", name="Data-science notebook starter")).to_be_visible()

    with step("app page"):
        page.get_by_role("link", name="Tabular classification", exact=True).click()
        expect(page.get_by_role("heading", name=re.compile("Tabular classification 1.0.0"))).to_be_visible()
        # What it creates, named as installing it under its own name would name them.
        expect(page.get_by_text("Pipeline “tabular-classification” (5 steps)")).to_be_visible()
        expect(page.get_by_text("Dataset “tabular-classification-iris” (1 file)")).to_be_visible()
        expect(page.locator(".readme")).not_to_be_empty()

    with step("install form"):
        page.get_by_role("link", name="Install", exact=True).click()
        expect(page).to_have_url(re.compile(r"/p/demo/apps/install/\?app=\d+$"))
        expect(page.get_by_label("Label column")).to_have_value("label")
        page.get_by_label("Installation name").fill("flowers")
        page.get_by_label("Dataset").fill("flowers-iris")
        page.get_by_role("button", name="Install").click()
        expect(page).to_have_url(re.compile(r"/p/demo/apps/installed/\d+/$"))
        installation = Installation.objects.get(project=project, name="flowers")
        [pipeline] = installation.objects_of("pipelines")

    with step("run"):
        page.get_by_role("button", name="Run", exact=True).click()
        run = PipelineRun.objects.get(pipeline=pipeline)
        expect(page.get_by_text(f"Started {run}.")).to_be_visible()
        page.get_by_role("link", name=str(run)).click()
        expect(page).to_have_url(re.compile(rf"/p/demo/runs/{run.pk}/$"))
        # run.js follows the run live: the status changes on the page as the agent reports.
        expect(page.locator("#run-status")).to_contain_text(re.compile("succeeded", re.I), timeout=RUN_SECONDS * 1000)
        run.refresh_from_db()
        assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))

    with step("service ready"):
        [service] = installation.objects_of("services")
        b.goto(f"/p/demo/services/{service.pk}/")
        expect(page.locator('#service-status [data-status="ready"]')).to_be_visible(timeout=SERVE_SECONDS * 1000)
        service.refresh_from_db()
        assert service.status == InferenceService.Status.READY, service.reason

    with step("try it"):
        b.goto(f"/p/demo/apps/installed/{installation.pk}/")
        form = page.locator("#try-it")
        expect(form.get_by_label("petal_width")).to_be_visible()
        for name, value in {
            "sepal_length": "6.7",
            "sepal_width": "3.0",
            "petal_length": "5.2",
            "petal_width": "2.3",
        }.items():
            form.get_by_label(name).fill(value)
        form.get_by_role("button", name="Predict").click()
        expect(page.locator("#prediction")).to_contain_text("Prediction: virginica")
