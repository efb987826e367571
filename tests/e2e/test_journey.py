"""A newcomer's journey through the portal in a real browser, as one test: log in, create a project, upload a CSV
dataset, build the iris pipeline in the editor by dragging templates and connecting them, run it while the logs and
the progress bar move live, open the experiment run and its metric chart, register the model (the pipeline's
register node) and give it an alias, deploy it, get a prediction in the test console, and read the run page in
Chinese.

Each step saves a numbered screenshot, test-results/e2e/test_a_newcomers_journey-<NN>-<step>.png; a step that fails
saves `…-failed.png` and its name is added to the error. The browsing fixture fails the test on any console error,
uncaught exception, failed request or request to another host, on every page of the journey.

A missing required argument shown on its node is covered by test_editor.py's
test_a_missing_required_argument_shows_on_its_node.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import expect

from apps.console.templatetags.project_nav import GROUPS as NAV_GROUPS
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.demo import IRIS_SPEC
from apps.jobs.models import Pipeline, PipelineRun
from apps.models.models import ModelVersion
from apps.projects.models import Project
from apps.serving.models import InferenceService
from tests.e2e.test_editor import connect, drag_template, field, node
from tests.factories import PASSWORD, UserFactory
from tests.serving.factories import artifact_store  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

RUN_SECONDS = 240  # five tasks, each a Python process importing scikit-learn, on a loaded CI machine
SERVE_SECONDS = 180  # the model server's replica starts and passes its readiness probe
SETOSA = [5.1, 3.5, 1.4, 0.2]  # the first row of the iris data

# The page records, across reloads, what the run page's progress bar showed and which log lines arrived, each
# with the page load it happened in (run.js reloads the page once the run is over).
RECORDER = """
document.addEventListener("DOMContentLoaded", () => {
  const bar = document.querySelector("#run-progress-text");
  const lines = document.querySelector("[data-log-lines]");
  if (!bar || !lines) return;
  const load = String(performance.timeOrigin);
  const progress = () => window.journeySaw(load, "progress", bar.textContent.trim());
  progress();
  new MutationObserver(progress).observe(bar, {childList: true, characterData: true, subtree: true});
  new MutationObserver((records) => records.forEach((record) => record.addedNodes.forEach((line) => {
    if (line.dataset && line.dataset.id) window.journeySaw(load, "log", line.textContent);
  }))).observe(lines, {childList: true});
});
"""


class Journey:
    """Numbered steps with a screenshot each."""

    def __init__(self, browsing) -> None:
        self.b = browsing
        self.number = 0

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.number += 1
        label = f"{self.number:02d}-{name.replace(' ', '-')}"
        try:
            yield
        except BaseException as exc:
            exc.add_note(f"in step {label} of the journey")
            try:
                exc.add_note(f"screenshot: {self.b.screenshot(f'{label}-failed')}")
            except Exception as unsaved:  # the page itself is gone: the step's own error is what matters
                exc.add_note(f"no screenshot: {unsaved}")
            raise
        self.b.screenshot(label)


def write_iris_csv(path: Path) -> Path:
    from sklearn.datasets import load_iris

    iris = load_iris()
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sepal_length", "sepal_width", "petal_length", "petal_width", "species"])
        for features, target in zip(iris.data, iris.target, strict=True):
            writer.writerow([*(f"{v:.1f}" for v in features), iris.target_names[target]])
    return path


def graph_of(spec: dict) -> list[tuple[str, str, list[str]]]:
    return [(n["name"], n["template"], n.get("depends_on", [])) for n in spec["nodes"]]


@pytest.mark.usefixtures("artifact_store")
def test_a_newcomers_journey(browsing, live_agent, live_workers, tmp_path):
    load_builtin_templates()  # what `migrate` does on a clean machine
    UserFactory(username="newcomer")
    b = browsing
    page = b.page
    journey = Journey(b)
    step = journey.step

    def tab(name: str):
        """A page of the project's navigation: its group's tab first, when that group is not the one open."""
        group = next(key for key, _label, pages in NAV_GROUPS for tab_name, label, _url in pages if label == name)
        nav = page.locator("[data-project-nav]")
        if not nav.locator(f'[data-group="{group}"].active').count():
            nav.locator(f'[data-group="{group}"]').click()
        return nav.locator(".nav-sub").get_by_role("link", name=name, exact=True)

    seen: list[tuple[str, str, str]] = []  # (page load, kind, text) from RECORDER
    page.expose_function("journeySaw", lambda load, kind, text: seen.append((load, kind, text)))
    page.add_init_script(RECORDER)

    with step("log in"):
        b.goto("/")
        expect(page).to_have_url(re.compile(r"/accounts/login/"))
        page.get_by_label("Username").fill("newcomer")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_text("You are not a member of any project yet.")).to_be_visible()

    with step("create a project"):
        page.get_by_role("link", name="Create your first project").click()
        page.get_by_label("Name").fill("Iris lab")
        page.get_by_label("Slug").fill("iris-lab")
        page.get_by_label("Description").fill("My first steps")
        page.get_by_role("button", name="Create project").click()
        expect(page).to_have_url(re.compile(r"/p/iris-lab/$"))
        expect(page.get_by_text("Project “Iris lab” created.")).to_be_visible()
        project = Project.objects.get(slug="iris-lab")

    with step("upload a CSV dataset"):
        tab("Datasets").click()
        page.get_by_role("link", name="New dataset").first.click()
        page.get_by_label("Name").fill("iris")
        page.get_by_label("Description").fill("Fisher's iris flowers")
        page.get_by_role("button", name="Create").click()
        expect(page.get_by_role("heading", name="Upload a new version")).to_be_visible()
        page.set_input_files("#files", str(write_iris_csv(tmp_path / "iris.csv")))
        page.get_by_label("Message").fill("The 150 rows")
        page.get_by_role("button", name="Upload and commit").click()
        expect(page).to_have_url(re.compile(r"/p/iris-lab/dataset-versions/\d+/$"))
        b.wait_for_scripts()  # htmx loads the preview into the page; until it runs, the link opens a page of its own
        page.get_by_role("link", name=re.compile("^iris.csv")).click()
        expect(page.locator("#preview")).to_contain_text("setosa")  # the first rows
        expect(page.get_by_text("Statistics are being computed.")).to_be_hidden()

    with step("build the iris pipeline"):
        page.get_by_role("link", name="Iris lab").click()  # the breadcrumb, back to the project's tabs
        tab("Pipelines").click()
        page.get_by_role("link", name="New pipeline").click()
        expect(page.locator("#pipeline-editor[data-ready]")).to_be_attached()
        for slug, x, y in [
            ("dataset-load", 110, 90),
            ("data-split", 330, 90),
            ("sklearn-train", 550, 90),
            ("evaluate", 550, 260),
            ("model-register", 330, 260),
        ]:
            drag_template(b, slug, x, y)
            expect(node(b, slug)).to_be_visible()
        # Edges in the demo's order of depends_on (apps/jobs/demo.py's IRIS_SPEC).
        for upstream, downstream in [
            ("dataset-load", "data-split"),
            ("data-split", "sklearn-train"),
            ("data-split", "evaluate"),
            ("sklearn-train", "evaluate"),
            ("sklearn-train", "model-register"),
            ("evaluate", "model-register"),
        ]:
            connect(b, upstream, downstream)
        expect(page.locator("[data-canvas] .x6-edge")).to_have_count(6)

        def set_up(slug: str, new_name: str, **args: str) -> None:
            node(b, slug).locator("rect").first.click()
            expect(page.locator("#pe-panel-title")).to_have_text(slug)
            for key, value in args.items():
                control = field(b, f"args.{key}")
                if control.evaluate("el => el.tagName") == "SELECT":
                    control.select_option(label=value)
                else:
                    control.fill(value)
                    control.press("Tab")
            field(b, "name").fill(new_name)
            field(b, "name").press("Tab")
            expect(node(b, new_name)).to_be_visible()

        set_up("dataset-load", "load", dataset="iris")
        set_up("data-split", "split", test_size="0.3", seed="7")
        set_up("sklearn-train", "train", model="random_forest")
        set_up("evaluate", "evaluate", min_accuracy="0.8")
        set_up("model-register", "register", name="iris-classifier")
        page.locator("[data-canvas]").focus()
        page.keyboard.press("Escape")
        expect(page.locator("#pe-panel-title")).to_have_text("Pipeline")
        field(b, "name").fill("iris")
        page.get_by_role("button", name="Save").click()
        expect(page.locator("[data-status]")).to_have_text("Saved.")
        pipeline = Pipeline.objects.get(project=project, name="iris")
        assert graph_of(pipeline.spec) == graph_of(IRIS_SPEC)

    with step("run it"):
        page.get_by_role("button", name="Run").click()
        expect(page).to_have_url(re.compile(r"/p/iris-lab/runs/\d+/$"))
        expect(page.locator("#run-progress")).to_be_visible()
        run = PipelineRun.objects.get(pipeline=pipeline)

    with step("watch live logs and the progress bar"):
        progress = page.locator("#run-progress-text")  # "2/5 nodes done · 1 running"
        expect(progress).to_have_text(re.compile(r"^[1-4]/5 nodes done"), timeout=RUN_SECONDS * 1000)
        expect(page.locator("[data-log-lines] .log-line").first).to_be_visible()
        b.screenshot(f"{journey.number:02d}-while-running")
        expect(progress).to_have_text("5/5 nodes done", timeout=RUN_SECONDS * 1000)
        expect(page.locator("#run-status")).to_contain_text(re.compile("succeeded", re.I))
        run.refresh_from_db()
        assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
        # Everything moved on the page first opened: no reload was needed to see it.
        first = seen[0][0]
        bar = [text for load, kind, text in seen if load == first and kind == "progress"]
        done = [int(text.split("/")[0]) for text in bar]
        assert done[0] < 5, bar  # opened while the run went on
        assert done[-1] == 5, bar
        assert done == sorted(done), bar
        assert len(set(done)) >= 3, bar  # it moved, more than once
        # Then the page reloads itself once, with the final timings and the actions on a finished run.
        expect(page.get_by_role("button", name="Re-run from here").first).to_be_visible()
        expect(page.locator("[data-log-lines]")).to_contain_text("[register#1/")  # the stored lines, sent again
        logged = {m.group(1) for load, kind, text in seen if load == first and kind == "log"
                  for m in [re.search(r"\[([\w-]+)#\d+/", text)] if m}  # fmt: skip
        assert {"train", "evaluate", "register"} <= logged, logged  # they started after the page opened

    with step("open the experiment run and see the metric chart"):
        tab("Experiments").click()
        page.get_by_role("link", name="iris", exact=True).click()
        page.locator("#runs a[href*='/tracking-runs/']").first.click()
        expect(page.locator("#run-source")).to_contain_text("train")
        chart = page.locator("#metric-charts .metric-chart").first
        expect(chart.locator("canvas")).to_be_visible()
        expect(page.locator("#metric-charts [data-chart-note]").first).to_contain_text("points")
        expect(page.locator("#metrics")).to_contain_text("train_accuracy")

    with step("register the model"):
        expect(page.locator("#lineage")).to_contain_text("iris-classifier v1")
        tab("Models").click()
        page.get_by_role("link", name="iris-classifier").click()
        versions = page.locator("#versions")
        expect(versions).to_contain_text("v1")
        expect(versions).to_contain_text("@staging")  # the register node's alias
        page.get_by_label("Alias", exact=True).fill("production")
        page.get_by_label("Version").select_option(label="v1")
        page.get_by_role("button", name="Set alias").click()
        expect(page.locator("#aliases")).to_contain_text("@production")
        version = ModelVersion.objects.get(registered_model__project=project, registered_model__name="iris-classifier")
        assert sorted(version.aliases.values_list("alias", flat=True)) == ["production", "staging"]

    with step("deploy it"):
        tab("Services").click()
        page.get_by_role("link", name="New service").click()
        page.get_by_label("Name").fill("iris")
        page.get_by_label("Registered model").select_option(label="iris-classifier")
        page.get_by_label("Alias to follow").fill("production")
        page.get_by_label("Memory per replica").fill("512Mi")
        page.get_by_role("button", name="Create and deploy").click()
        expect(page).to_have_url(re.compile(r"/p/iris-lab/services/\d+/$"))
        service = InferenceService.objects.get(project=project, name="iris")
        expect(page.locator('#service-status [data-status="ready"]')).to_be_visible(timeout=SERVE_SECONDS * 1000)
        service.refresh_from_db()
        assert service.status == "ready", service.reason

    with step("get a prediction in the test console"):
        console = page.locator("#serving-console")
        expect(console).to_be_visible()
        fields = console.locator("[data-feature]")  # one per feature of the model's signature
        expect(fields).to_have_count(len(SETOSA))
        console.get_by_role("button", name="Use a row from the dataset").click()  # the training data, via lineage
        expect(console.locator("[data-row-source]")).to_have_text(re.compile(r"^\S+@1, \S+, row \d+$"))
        expect(fields.first).not_to_have_value("0")
        for i, value in enumerate(SETOSA):
            fields.nth(i).fill(str(value))
        console.get_by_text("JSON request (Open Inference Protocol v2)").click()  # the request the fields wrote
        assert json.loads(console.get_by_label("JSON request").input_value())["inputs"][0]["data"] == SETOSA
        console.get_by_role("button", name="Predict").click()
        expect(console.locator("[data-console-status]")).to_contain_text("200")
        expect(page.locator("#console-response")).to_contain_text("setosa")

    with step("read the run page in Chinese"):
        tab("Runs").click()
        page.get_by_role("link", name="iris #1").click()
        expect(page).to_have_url(re.compile(rf"/p/iris-lab/runs/{run.pk}/$"))
        b.wait_for_scripts()  # the switcher submits on change once the page's scripts run
        page.locator("[data-language-switcher]").get_by_label("Language").select_option("zh-hans")  # submits
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        expect(page).to_have_url(re.compile(rf"/p/iris-lab/runs/{run.pk}/$"))  # back on the same page
        expect(page.get_by_role("heading", name="日志")).to_be_visible()  # "Logs"
        expect(page.locator(".nav-sub .active")).to_have_text("运行")  # the "Runs" page of the navigation
        expect(page.locator("#run-progress")).to_have_attribute("aria-valuenow", "5")
        expect(page.locator("[data-log-lines] .log-line").first).to_be_visible()

    b.assert_clean()
