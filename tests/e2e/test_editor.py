"""The pipeline editor in a real browser: build the iris pipeline by dragging templates onto the canvas and
connecting them, save, reload, run it and watch its nodes turn green; a missing required argument shows on its
node; the keyboard alone builds a pipeline (add, connect, copy, paste, undo, redo, delete).

Screenshots: test-results/e2e/<test>-<step>.png.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from playwright.sync_api import expect

from apps.datasets import demo as datasets_demo
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.demo import IRIS_SPEC
from apps.jobs.models import Pipeline, PipelineRun
from apps.jobs.services import save_pipeline
from apps.jobs.yaml_io import dump_pipeline, load_pipeline
from tests.e2e.threads import elsewhere
from tests.factories import PASSWORD
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

ERROR_STROKE = "#dc3545"
SUCCEEDED_FILL = "#d1e7dd"


def canvas_point(b, x: float, y: float) -> tuple[float, float]:
    box = b.page.locator("[data-canvas]").bounding_box()
    return box["x"] + x, box["y"] + y


def centre(locator) -> tuple[float, float]:
    box = locator.bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def drag_template(b, slug: str, x: float, y: float) -> None:
    """Press on the template in the palette, move onto the canvas and let go at (x, y) of the canvas."""
    button = b.page.locator(f'[data-palette] button[data-template="{slug}"]')
    button.scroll_into_view_if_needed()
    sx, sy = centre(button)
    mouse = b.page.mouse
    mouse.move(sx, sy)
    mouse.down()
    mouse.move(sx + 12, sy + 4, steps=3)
    tx, ty = canvas_point(b, x, y)
    mouse.move(tx, ty, steps=15)
    mouse.up()


def node(b, name: str, scope: str = "[data-canvas]"):
    return b.page.locator(f'{scope} g[data-node="{name}"]')


def connect(b, upstream: str, downstream: str) -> None:
    """Drag from the output port (right) of one node to the input port (left) of another."""
    mouse = b.page.mouse
    mouse.move(*centre(node(b, upstream).locator('circle[port="out"]')))
    mouse.down()
    mouse.move(*centre(node(b, downstream).locator('circle[port="in"]')), steps=12)
    mouse.up()


def edge_middle(b, index: int) -> tuple[float, float]:
    """Where on the page the middle of an edge's line is (edges in the order they were drawn)."""
    return tuple(
        b.page.evaluate(
            """(index) => {
                const lines = Array.from(document.querySelectorAll('[data-canvas] .x6-edge path[stroke="#6c757d"]'));
                const line = lines.at(index);
                const at = line.getPointAtLength(line.getTotalLength() / 2);
                const m = line.getScreenCTM();
                return [at.x * m.a + at.y * m.c + m.e, at.x * m.b + at.y * m.d + m.f];
            }""",
            index,
        )
    )


def field(b, key: str):
    return b.page.locator(f'[data-panel] [data-field="{key}"]')


def node_names(b) -> list[str]:
    return b.page.eval_on_selector_all("[data-canvas] g[data-node]", "els => els.map(e => e.dataset.node)")


def stroke(b, name: str, scope: str = "[data-canvas]") -> str:
    return node(b, name, scope).locator("rect").first.get_attribute("stroke")


def drive_elsewhere(run: PipelineRun) -> PipelineRun:
    """`drive` the run to its end from another thread: the orchestrator publishes the status events that the run
    page shows."""
    return elsewhere(lambda: drive(run, timeout=240))


def open_editor(b, path: str) -> None:
    b.goto(path)
    expect(b.page.locator("#pipeline-editor[data-ready]")).to_be_attached()


@pytest.fixture
def iris_lab(world) -> Pipeline:
    """Project A with the built-in templates, the iris dataset and the demo's iris pipeline (not the demo's
    trained models: they take half a minute and the editor needs none)."""
    load_builtin_templates()
    datasets_demo.populate(world.project_a, world.alice)
    return save_pipeline(world.project_a, world.alice, name="iris", spec=copy.deepcopy(IRIS_SPEC))


def test_build_the_iris_pipeline_by_dragging_then_save_reload_and_run_it(browsing, iris_lab, live_agent, world):
    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto("/p/project-a/pipelines/")
    b.page.get_by_role("link", name="New pipeline").click()
    expect(b.page.locator("#pipeline-editor[data-ready]")).to_be_attached()
    assert b.page.url.endswith("/p/project-a/pipelines/new/editor/")

    # The palette filters as one types, by name, slug or category.
    b.page.fill("[data-palette-search]", "split")
    expect(b.page.locator('[data-palette] button[data-template="data-split"]')).to_be_visible()
    expect(b.page.locator('[data-palette] button[data-template="evaluate"]')).to_be_hidden()
    b.page.fill("[data-palette-search]", "")

    for slug, x, y in [
        ("dataset-load", 120, 100),
        ("data-split", 350, 100),
        ("sklearn-train", 580, 100),
        ("evaluate", 580, 260),
    ]:
        drag_template(b, slug, x, y)
        expect(node(b, slug)).to_be_visible()
    assert node_names(b) == ["dataset-load", "data-split", "sklearn-train", "evaluate"]
    connect(b, "dataset-load", "data-split")
    connect(b, "data-split", "sklearn-train")
    connect(b, "sklearn-train", "evaluate")
    connect(b, "data-split", "evaluate")
    expect(b.page.locator("[data-canvas] .x6-edge")).to_have_count(4)

    # An edge that would close a loop is refused, saying which.
    connect(b, "evaluate", "dataset-load")
    expect(b.page.locator("[data-status]")).to_contain_text(
        "would make a cycle (dataset-load → data-split → evaluate → dataset-load)"
    )
    expect(b.page.locator("[data-canvas] .x6-edge")).to_have_count(4)

    # A needless edge: selected by a click, it has a remove button.
    connect(b, "dataset-load", "evaluate")
    expect(b.page.locator("[data-canvas] .x6-edge")).to_have_count(5)
    b.page.mouse.click(*edge_middle(b, -1))
    b.page.locator("[data-canvas] .x6-cell-tool-button").click()
    expect(b.page.locator("[data-canvas] .x6-edge")).to_have_count(4)
    b.screenshot("1-built")

    # The node's form comes from its template's schema: the required dataset is flagged until it is given.
    node(b, "dataset-load").locator("rect").first.click()
    expect(b.page.locator("#pe-panel-title")).to_have_text("dataset-load")
    expect(b.page.locator("[data-panel]")).to_contain_text("Required.")
    field(b, "args.dataset").fill("iris")
    field(b, "name").fill("load")
    field(b, "name").press("Tab")
    expect(node(b, "load")).to_be_visible()
    expect(field(b, "args.dataset")).to_have_value("iris")
    expect(b.page.locator("[data-panel]")).not_to_contain_text("Required.")
    node(b, "sklearn-train").locator("rect").first.click()
    expect(field(b, "args.model")).to_have_value("")  # the template's default applies
    field(b, "retries").fill("1")
    field(b, "retries").press("Tab")

    # The pipeline's own settings show when no node is selected.
    b.page.locator("[data-canvas]").focus()
    b.page.keyboard.press("Escape")
    expect(b.page.locator("#pe-panel-title")).to_have_text("Pipeline")
    field(b, "name").fill("iris-editor")
    field(b, "description").fill("Built in the editor")
    b.page.get_by_role("button", name="Save").click()
    expect(b.page.locator("[data-status]")).to_have_text("Saved.")
    expect(b.page).to_have_url(re.compile(r"/p/project-a/pipelines/\d+/editor/$"))
    b.screenshot("2-saved")

    saved = Pipeline.objects.get(project=world.project_a, name="iris-editor")
    assert saved.description == "Built in the editor"
    assert saved.spec == {
        "nodes": [
            {"name": "load", "template": "dataset-load", "args": {"dataset": "iris"}},
            {"name": "data-split", "template": "data-split", "depends_on": ["load"]},
            {"name": "sklearn-train", "template": "sklearn-train", "retries": 1, "depends_on": ["data-split"]},
            {"name": "evaluate", "template": "evaluate", "depends_on": ["sklearn-train", "data-split"]},
        ]
    }
    assert set(saved.layout["nodes"]) == {"load", "data-split", "sklearn-train", "evaluate"}
    # The YAML the pipeline page shows reads back to the same spec.
    assert load_pipeline(dump_pipeline(saved.name, saved.description, saved.spec))[2] == saved.spec

    # Reloaded, the same graph in the same places.
    placed = {name: node(b, name).bounding_box() for name in ["load", "evaluate"]}
    b.page.reload()
    expect(b.page.locator("#pipeline-editor[data-ready]")).to_be_attached()
    expect(b.page.locator("[data-canvas] g[data-node]")).to_have_count(4)  # X6 draws the views asynchronously
    assert sorted(node_names(b)) == sorted(["load", "data-split", "sklearn-train", "evaluate"])
    expect(b.page.locator("[data-canvas] .x6-edge")).to_have_count(4)
    again = {name: node(b, name).bounding_box() for name in ["load", "evaluate"]}
    assert again["evaluate"]["x"] - again["load"]["x"] == pytest.approx(
        placed["evaluate"]["x"] - placed["load"]["x"], abs=2
    )

    # Run: the run page opens with the same canvas, read-only, and follows the run live.
    live: dict[str, set[str]] = {}

    def on_frame(payload) -> None:
        message = json.loads(payload)
        if message.get("type") == "status":
            for name, state in (message.get("nodes") or {}).items():
                live.setdefault(name, set()).add(state["status"])

    b.page.on("websocket", lambda ws: ws.on("framereceived", on_frame))
    b.page.get_by_role("button", name="Run").click()
    expect(b.page).to_have_url(re.compile(r"/p/project-a/runs/\d+/$"))
    expect(b.page.locator("[data-run-canvas][data-ready]")).to_be_attached()
    run = PipelineRun.objects.get(pipeline=saved)
    assert [n["name"] for n in run.spec["nodes"]] == ["load", "data-split", "sklearn-train", "evaluate"]
    run = drive_elsewhere(run)
    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    for name in ["load", "data-split", "sklearn-train", "evaluate"]:
        expect(node(b, name, "[data-run-canvas]")).to_have_attribute("aria-label", re.compile("Succeeded"))
    # The states came over the websocket as they changed, not only with the page: every node's end, and the start
    # of the two that import scikit-learn (a task that ends within the agent's START_SETTLE_SECONDS of its start, as
    # `load` may, reports both at once).
    assert {name for name, states in live.items() if "succeeded" in states} == {
        "load",
        "data-split",
        "sklearn-train",
        "evaluate",
    }
    assert {"running", "succeeded"} <= live["sklearn-train"], live
    assert {"running", "succeeded"} <= live["evaluate"], live
    rect = node(b, "evaluate", "[data-run-canvas]").locator("rect").first
    assert rect.get_attribute("fill") == SUCCEEDED_FILL
    b.screenshot("3-run-succeeded")

    # A node of the graph opens its logs.
    node(b, "evaluate", "[data-run-canvas]").click()
    viewer = b.page.locator("[data-log-viewer]")
    expect(viewer.locator("[data-log-node] option:checked")).to_have_attribute("data-node", "evaluate")
    expect(viewer.locator("[data-log-lines]")).to_contain_text("[evaluate#1/")
    expect(viewer.locator("[data-log-lines]")).not_to_contain_text("[load#1/")
    b.screenshot("4-node-logs")
    b.assert_clean()


def test_a_missing_required_argument_shows_on_its_node(browsing, iris_lab, world):
    b = browsing
    iris = iris_lab
    written = iris.spec
    b.log_in("alice", PASSWORD)
    open_editor(b, f"/p/project-a/pipelines/{iris.pk}/editor/")
    expect(b.page.locator("[data-canvas] g[data-node]")).to_have_count(len(written["nodes"]))
    assert sorted(node_names(b)) == sorted(n["name"] for n in written["nodes"])

    # Saved untouched, a pipeline written elsewhere keeps its spec exactly (the editor only adds a layout).
    b.page.get_by_role("button", name="Save").click()
    expect(b.page.locator("[data-status]")).to_have_text("Saved.")
    iris.refresh_from_db()
    assert iris.spec == written
    assert set(iris.layout["nodes"]) == {"load", "split", "train", "evaluate", "register"}

    node(b, "load").locator("rect").first.click()
    field(b, "args.dataset").fill("")
    field(b, "args.dataset").press("Tab")
    expect(b.page.locator("[data-panel]")).to_contain_text("Required.")  # inline, before the server is asked
    b.page.get_by_role("button", name="Save").click()
    expect(b.page.locator("[data-status]")).to_contain_text("Problems on 1 node(s)")
    expect(node(b, "load").locator("rect").first).to_have_attribute("stroke", ERROR_STROKE)
    assert stroke(b, "split") != ERROR_STROKE
    expect(node(b, "load")).to_have_attribute("aria-label", re.compile("1 problem"))
    expect(b.page.locator("#pe-panel-title")).to_have_text("load")
    expect(field(b, "args.dataset")).to_have_attribute("aria-invalid", "true")
    b.screenshot("1-error-on-node")
    iris.refresh_from_db()
    assert iris.spec == written  # nothing was saved

    # Undo brings the argument back; saving clears the mark.
    b.page.locator("[data-canvas]").focus()
    b.page.keyboard.press("Control+z")
    expect(field(b, "args.dataset")).to_have_value("iris@latest")
    b.page.get_by_role("button", name="Save").click()
    expect(b.page.locator("[data-status]")).to_have_text("Saved.")
    expect(node(b, "load").locator("rect").first).not_to_have_attribute("stroke", ERROR_STROKE)
    iris.refresh_from_db()
    assert iris.spec == written
    b.assert_clean()


def test_the_keyboard_builds_a_pipeline_with_copy_paste_undo_and_redo(browsing, world):
    load_builtin_templates()
    b = browsing
    b.log_in("alice", PASSWORD)
    open_editor(b, "/p/project-a/pipelines/new/editor/")
    page = b.page

    # Down from the search goes to the first template that matches; Enter adds it.
    page.focus("[data-palette-search]")
    page.keyboard.type("python code")
    page.keyboard.press("ArrowDown")
    expect(page.locator('[data-palette] button[data-template="python"]')).to_be_focused()
    page.keyboard.press("Enter")
    expect(node(b, "python")).to_be_visible()
    expect(page.locator("#pe-panel-title")).to_have_text("python")
    field(b, "args.code").fill("print('first')")
    field(b, "args.code").press("Tab")

    # Copy and paste the node: the copy gets a free name and the same arguments.
    node(b, "python").focus()
    page.keyboard.press("Control+c")
    page.keyboard.press("Control+v")
    expect(node(b, "python-2")).to_be_visible()
    expect(page.locator("#pe-panel-title")).to_have_text("python-2")
    expect(field(b, "args.code")).to_have_value("print('first')")

    # The panel connects nodes without a mouse: python-2 runs after python.
    page.locator('[data-panel] input[type="checkbox"][value="python"]').focus()
    page.keyboard.press("Space")
    expect(page.locator("[data-canvas] .x6-edge")).to_have_count(1)

    # Undo the edge, redo it; undo the paste and the edge goes with the node.
    page.locator("[data-canvas]").focus()
    page.keyboard.press("Control+z")
    expect(page.locator("[data-canvas] .x6-edge")).to_have_count(0)
    page.keyboard.press("Control+Shift+z")
    expect(page.locator("[data-canvas] .x6-edge")).to_have_count(1)
    page.get_by_role("button", name="Undo").click()
    page.get_by_role("button", name="Undo").click()
    expect(node(b, "python-2")).to_have_count(0)
    page.get_by_role("button", name="Redo").click()
    page.get_by_role("button", name="Redo").click()
    expect(node(b, "python-2")).to_be_visible()
    expect(page.locator("[data-canvas] .x6-edge")).to_have_count(1)

    # Tab reaches a node; Delete removes it.
    node(b, "python-2").focus()
    page.keyboard.press("Delete")
    expect(node(b, "python-2")).to_have_count(0)
    page.keyboard.press("Control+z")
    expect(node(b, "python-2")).to_be_visible()

    page.locator("[data-canvas]").focus()
    page.keyboard.press("Escape")
    field(b, "name").fill("by-keyboard")
    page.keyboard.press("Control+s")
    expect(page.locator("[data-status]")).to_have_text("Saved.")
    b.screenshot("1-saved")
    saved = Pipeline.objects.get(project=world.project_a, name="by-keyboard")
    assert saved.spec == {
        "nodes": [
            {"name": "python", "template": "python", "args": {"code": "print('first')"}},
            {"name": "python-2", "template": "python", "args": {"code": "print('first')"}, "depends_on": ["python"]},
        ]
    }
    b.assert_clean()
