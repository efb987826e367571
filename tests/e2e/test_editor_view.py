"""The pipeline editor's view in a real browser (issue 26.7): it opens at a readable zoom (fit, then clamped: a big
graph starts at its top left at 60 %, not shrunk to unreadable boxes), stays in the page's grid, routes edges around
the nodes between their ends and around the nodes at their ends when those stand close together, moves a node
dropped onto another aside, has zoom buttons with a readout and a minimap whose frame is exactly the visible area,
its heading follows the saved name, and it is usable at 800 px.

Screenshots: test-results/e2e/<test>-<step>.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from apps.jobs.services import save_pipeline
from tests.e2e.test_editor import centre, connect, drag_template, node
from tests.factories import PASSWORD, ProjectFactory, UserFactory, python_template

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# Every point along every edge, against every node's box that is not one of the edge's ends (screen coordinates);
# an edge's ends are the nodes its first and last points touch (its ports sit on their left and right sides).
CROSSINGS = """() => {
  const canvas = document.querySelector('[data-canvas]');
  const boxes = [...canvas.querySelectorAll('g.x6-node')].map(g => ({
    name: g.getAttribute('data-node'), r: g.querySelector('rect').getBoundingClientRect(),
  }));
  const near = (r, x, y) => x > r.left - 12 && x < r.right + 12 && y > r.top - 12 && y < r.bottom + 12;
  const crossings = [];
  let edges = 0;
  canvas.querySelectorAll('g.x6-edge').forEach(g => {
    const line = g.querySelector('path[stroke="#6c757d"]');
    const m = line.getScreenCTM();
    const total = line.getTotalLength();
    const at = t => { const p = line.getPointAtLength(total * t);
                      return [p.x * m.a + p.y * m.c + m.e, p.x * m.b + p.y * m.d + m.f]; };
    const [sx, sy] = at(0), [tx, ty] = at(1);
    const others = boxes.filter(b => !near(b.r, sx, sy) && !near(b.r, tx, ty));
    edges += 1;
    for (let i = 0; i <= 200; i++) {
      const [x, y] = at(i / 200);
      others.forEach(b => {
        const r = b.r;
        if (x > r.left + 2 && x < r.right - 2 && y > r.top + 2 && y < r.bottom - 2) crossings.push(b.name);
      });
    }
  });
  return {edges: edges, crossings: [...new Set(crossings)]};
}"""

# Every point along every edge against every node's box, the edge's own two included (an edge leaves its source's
# right side and enters its target's left side: it touches their boxes there, never goes inside).
EDGES_INSIDE_NODES = """() => {
  const canvas = document.querySelector('[data-canvas]');
  const boxes = [...canvas.querySelectorAll('g.x6-node')].map(g => ({
    name: g.getAttribute('data-node'), r: g.querySelector('rect').getBoundingClientRect(),
  }));
  const inside = [];
  canvas.querySelectorAll('g.x6-edge').forEach(g => {
    const line = g.querySelector('path[stroke="#6c757d"]');
    const m = line.getScreenCTM();
    const total = line.getTotalLength();
    for (let i = 0; i <= 400; i++) {
      const p = line.getPointAtLength(total * i / 400);
      const x = p.x * m.a + p.y * m.c + m.e, y = p.x * m.b + p.y * m.d + m.f;
      boxes.forEach(b => {
        const r = b.r;
        if (x > r.left + 1 && x < r.right - 1 && y > r.top + 1 && y < r.bottom - 1) inside.push(b.name);
      });
    }
  });
  return [...new Set(inside)];
}"""

# The canvas's box, the minimap's frame, and each node's box on the canvas and in the minimap (screen coordinates),
# once the minimap has caught up (it redraws on the next animation frame after a change).
MINIMAP = """async () => {
  await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
  const box = el => {
    const r = el.getBoundingClientRect();
    return {x: r.x, y: r.y, width: r.width, height: r.height};
  };
  const minimap = document.querySelector('[data-minimap]');
  const nodes = {};
  document.querySelectorAll('[data-canvas] g.x6-node').forEach(g => {
    const small = minimap.querySelector(`g.x6-node[data-cell-id="${g.getAttribute('data-cell-id')}"] rect`);
    nodes[g.dataset.node] = {big: box(g.querySelector('rect')), small: box(small)};
  });
  return {
    canvas: box(document.querySelector('[data-canvas]')),
    frame: box(minimap.querySelector('[data-minimap-frame]')),
    minimap: box(minimap),
    nodes: nodes,
  };
}"""


@pytest.fixture
def lab():
    owner = UserFactory(username="eddie")
    project = ProjectFactory(owner=owner, slug="lab", name="Lab")
    python_template(project)
    return owner, project


def open_editor(browsing, pipeline, width=1440):
    page = browsing.page
    page.set_viewport_size({"width": width, "height": 900})
    browsing.log_in("eddie", PASSWORD)
    browsing.goto(f"/p/lab/pipelines/{pipeline.pk}/editor/")
    expect(page.locator("#pipeline-editor[data-ready]")).to_be_attached()
    return page


def test_an_edge_that_skips_a_node_goes_around_it(browsing, lab):
    owner, project = lab
    nodes = [
        {"name": "a", "template": "py", "args": {"code": "1"}},
        {"name": "b", "template": "py", "args": {"code": "1"}, "depends_on": ["a"]},
        {"name": "c", "template": "py", "args": {"code": "1"}, "depends_on": ["a", "b"]},
    ]
    layout = {"nodes": {"a": {"x": 0, "y": 0}, "b": {"x": 260, "y": 0}, "c": {"x": 520, "y": 0}}}  # b between a, c
    pipe = save_pipeline(project, owner, name="skip", spec={"nodes": nodes}, layout=layout)
    page = open_editor(browsing, pipe)
    assert page.evaluate(CROSSINGS) == {"edges": 3, "crossings": []}  # a → c does not run behind b
    assert 60 <= int(page.locator("[data-zoom]").inner_text().rstrip(" %")) <= 100  # fitted, never blown up
    browsing.screenshot("routed")
    browsing.assert_clean()


def test_a_big_graph_opens_readable_at_its_start_with_zoom_buttons_and_a_minimap(browsing, lab):
    owner, project = lab
    nodes = [{"name": "n0", "template": "py", "args": {"code": "1"}}]
    nodes += [
        {"name": f"n{i}", "template": "py", "args": {"code": "1"}, "depends_on": [f"n{i - 1}"]} for i in range(1, 30)
    ]
    pipe = save_pipeline(project, owner, name="long", spec={"nodes": nodes})
    page = open_editor(browsing, pipe)

    zoom = page.locator("[data-zoom]")
    assert zoom.inner_text() == "60 %"  # fit would be ~15 %: clamped to the readable floor
    canvas = page.locator("[data-canvas]").bounding_box()
    first = page.locator('[data-canvas] g[data-node="n0"] rect').first.bounding_box()
    assert canvas["x"] <= first["x"] < canvas["x"] + 60  # the start of the graph, at the top left
    assert canvas["y"] <= first["y"] < canvas["y"] + canvas["height"]
    expect(page.locator("[data-minimap] [data-minimap-frame]")).to_be_visible()
    minimap_matches_view(page)  # the frame is the start of the graph that the canvas shows
    browsing.screenshot("big-graph")

    page.get_by_role("button", name="Zoom in").click()
    expect(zoom).to_have_text("72 %")
    page.get_by_role("button", name="Zoom out").click()
    page.get_by_role("button", name="Zoom out").click()
    expect(zoom).to_have_text("50 %")
    page.get_by_role("button", name="Actual size").click()
    expect(zoom).to_have_text("100 %")
    page.get_by_role("button", name="Fit").click()
    expect(zoom).to_have_text("60 %")
    browsing.assert_clean()


@pytest.mark.parametrize("width", [1440, 800])
def test_it_stays_in_the_page_grid_and_its_heading_follows_the_saved_name(browsing, lab, width):
    owner, project = lab
    pipe = save_pipeline(
        project, owner, name="first", spec={"nodes": [{"name": "a", "template": "py", "args": {"code": "1"}}]}
    )
    page = open_editor(browsing, pipe, width)
    main = page.locator("main.container").bounding_box()
    editor = page.locator("#pipeline-editor").bounding_box()
    assert main["x"] <= editor["x"]
    assert editor["x"] + editor["width"] <= main["x"] + main["width"] + 1
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.locator("[data-canvas]").bounding_box()["width"] >= (650 if width == 800 else 600)
    expect(page.locator("[data-editor-title]")).to_have_text("Editing first")

    name = page.locator('[data-panel] input[data-field="name"]')
    name.fill("renamed")
    name.press("Tab")
    page.locator('[data-action="save"]').click()
    expect(page.locator("[data-status]")).to_have_text("Saved.")
    expect(page.locator("[data-editor-title]")).to_have_text("Editing renamed")
    assert page.title().startswith("Edit renamed ·")
    browsing.screenshot(f"grid-{width}")
    browsing.assert_clean()


def minimap_matches_view(page) -> dict:
    """The minimap's frame is the canvas's visible area: the minimap shows the graph at k times the canvas's size
    (a node's width there over its width on the canvas), the frame is the canvas's box times k, and every node
    sits in the frame where it sits in the canvas. Returns the boxes (MINIMAP)."""
    m = page.evaluate(MINIMAP)
    canvas, frame, minimap = m["canvas"], m["frame"], m["minimap"]
    first = next(iter(m["nodes"].values()))
    k = first["small"]["width"] / first["big"]["width"]
    assert 0 < k < 1
    assert frame["width"] == pytest.approx(canvas["width"] * k, abs=1.5)
    assert frame["height"] == pytest.approx(canvas["height"] * k, abs=1.5)
    for box in m["nodes"].values():
        assert box["small"]["width"] == pytest.approx(box["big"]["width"] * k, abs=0.5)
        assert box["small"]["x"] - frame["x"] == pytest.approx((box["big"]["x"] - canvas["x"]) * k, abs=1.5)
        assert box["small"]["y"] - frame["y"] == pytest.approx((box["big"]["y"] - canvas["y"]) * k, abs=1.5)
    # Inside the minimap, never cut off by its edge.
    assert contains(minimap, frame)
    m["k"] = k
    return m


def drag(page, start: tuple[float, float], end: tuple[float, float], steps: int) -> None:
    """Press at start, move to end in steps and let go, waiting for the page to have handled each move (two
    animation frames) before the next. On a loaded machine Chromium can otherwise deliver the moves after the
    release: the minimap then saw a press and a release with no move in between, a click, and nothing panned."""
    mouse = page.mouse
    mouse.move(*start)
    mouse.down()
    for step in range(1, steps + 1):
        mouse.move(start[0] + (end[0] - start[0]) * step / steps, start[1] + (end[1] - start[1]) * step / steps)
        page.evaluate(FRAMES)
    mouse.up()


def pointer_reaches(page, point: tuple[float, float], selector: str) -> None:
    """Wait until the pointer at `point` would hit `selector` (something on top of it for a while, such as a toast,
    is waited out), or fail naming what it hits instead (None: the point is outside the window)."""
    hits = "([x, y, s]) => !!document.elementFromPoint(x, y)?.closest(s)"
    try:
        page.wait_for_function(hits, arg=[*point, selector], timeout=10_000)
    except PlaywrightTimeoutError:
        found = page.evaluate("([x, y]) => document.elementFromPoint(x, y)?.outerHTML.slice(0, 400)", [*point])
        pytest.fail(f"at {point} the pointer hits {found!r}, not {selector}")


FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def contains(outer: dict, inner: dict, slack: float = 0.5) -> bool:
    return (
        outer["x"] - slack <= inner["x"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
        and outer["y"] - slack <= inner["y"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack
    )


def test_the_minimap_frames_exactly_what_the_canvas_shows_and_moves_it(browsing, lab):
    owner, project = lab
    nodes = [
        {"name": "a", "template": "py", "args": {"code": "1"}},
        {"name": "b", "template": "py", "args": {"code": "1"}, "depends_on": ["a"]},
        {"name": "c", "template": "py", "args": {"code": "1"}, "depends_on": ["b"]},
    ]
    layout = {"nodes": {"a": {"x": 0, "y": 0}, "b": {"x": 260, "y": 0}, "c": {"x": 520, "y": 120}}}
    pipe = save_pipeline(project, owner, name="small", spec={"nodes": nodes}, layout=layout)
    page = open_editor(browsing, pipe)
    zoom = page.locator("[data-zoom]")
    # The canvas and its minimap in view, at once: Bootstrap's `scroll-behavior: smooth` would still be scrolling
    # while the boxes are measured, and the pointer would then land where the frame no longer is.
    centre_canvas = "el => el.scrollIntoView({block: 'center', behavior: 'instant'})"
    page.locator(".pe-canvas").evaluate(centre_canvas)

    # Fitted: the whole graph is in view, so the frame holds the whole picture.
    fitted = minimap_matches_view(page)
    fitted_zoom = zoom.inner_text()
    assert all(contains(fitted["frame"], box["small"]) for box in fitted["nodes"].values())
    browsing.screenshot("1-fitted")

    # Zoomed in: the frame shrinks to the part in view and still matches it.
    page.get_by_role("button", name="Zoom in").click()
    page.get_by_role("button", name="Zoom in").click()
    expect(zoom).not_to_have_text(fitted_zoom)
    # Clicking the buttons may scroll the page (Playwright brings a button out from under the sticky navbar): with
    # the page at the top the minimap's frame was below the fold and the drag below never reached it.
    page.locator(".pe-canvas").evaluate(centre_canvas)
    zoomed = minimap_matches_view(page)
    assert zoomed["frame"]["width"] < fitted["frame"]["width"] - 10
    assert not all(contains(zoomed["frame"], box["small"]) for box in zoomed["nodes"].values())
    browsing.screenshot("2-zoomed")

    # Panning the canvas (a drag on its background) moves the frame over the picture the other way.
    canvas = zoomed["canvas"]
    drag(page, (canvas["x"] + 30, canvas["y"] + 30), (canvas["x"] + 150, canvas["y"] + 110), steps=8)
    panned = minimap_matches_view(page)
    assert panned["nodes"]["a"]["big"]["x"] == pytest.approx(zoomed["nodes"]["a"]["big"]["x"] + 120, abs=2)
    before = zoomed["frame"]["x"] - zoomed["nodes"]["a"]["small"]["x"]
    after = panned["frame"]["x"] - panned["nodes"]["a"]["small"]["x"]
    assert after == pytest.approx(before - 120 * panned["k"], abs=1.5)
    browsing.screenshot("3-panned")

    # Dragging the frame pans the canvas: the frame moves right, the view moves right, the nodes move left.
    frame = panned["frame"]
    middle = (frame["x"] + frame["width"] / 2, frame["y"] + frame["height"] / 2)
    pointer_reaches(page, middle, "[data-minimap-frame]")
    drag(page, middle, (middle[0] + 12, middle[1] + 4), steps=6)
    dragged = minimap_matches_view(page)
    k = panned["k"]
    assert dragged["nodes"]["a"]["big"]["x"] == pytest.approx(panned["nodes"]["a"]["big"]["x"] - 12 / k, abs=3)
    assert dragged["nodes"]["a"]["big"]["y"] == pytest.approx(panned["nodes"]["a"]["big"]["y"] - 4 / k, abs=3)

    # A click in the minimap centres the canvas there.
    page.mouse.click(*centre(page.locator(f'[data-minimap] g.x6-node[data-cell-id="{cell_id(page, "c")}"] rect')))
    clicked = minimap_matches_view(page)
    c, canvas = clicked["nodes"]["c"]["big"], clicked["canvas"]
    assert c["x"] + c["width"] / 2 == pytest.approx(canvas["x"] + canvas["width"] / 2, abs=8)
    assert c["y"] + c["height"] / 2 == pytest.approx(canvas["y"] + canvas["height"] / 2, abs=8)
    browsing.screenshot("4-clicked")

    # Fit again: the frame holds the whole picture again.
    page.get_by_role("button", name="Fit").click()
    refitted = minimap_matches_view(page)
    assert all(contains(refitted["frame"], box["small"]) for box in refitted["nodes"].values())
    browsing.assert_clean()


def cell_id(page, name: str) -> str:
    return page.locator(f'[data-canvas] g[data-node="{name}"]').get_attribute("data-cell-id")


def test_edges_between_close_nodes_go_around_them(browsing, lab):
    owner, project = lab
    # Four pairs, each an edge from aN to bN with bN close by: below (12 px apart), to the right (10 px), below and
    # to the left (22 px), to the left on the same row (20 px).
    at = {
        "a1": (0, 0), "b1": (0, 70),
        "a2": (500, 0), "b2": (700, 20),
        "a3": (30, 400), "b3": (0, 480),
        "a4": (710, 400), "b4": (500, 420),
    }  # fmt: skip
    nodes = []
    for pair in "1234":
        nodes.append({"name": f"a{pair}", "template": "py", "args": {"code": "1"}})
        nodes.append({"name": f"b{pair}", "template": "py", "args": {"code": "1"}, "depends_on": [f"a{pair}"]})
    layout = {"nodes": {name: {"x": x, "y": y} for name, (x, y) in at.items()}}
    pipe = save_pipeline(project, owner, name="close", spec={"nodes": nodes}, layout=layout)
    page = open_editor(browsing, pipe)
    expect(page.locator("[data-canvas] g.x6-edge")).to_have_count(4)
    assert page.evaluate(EDGES_INSIDE_NODES) == []
    browsing.screenshot("close")
    browsing.assert_clean()


def test_a_node_dropped_onto_another_moves_aside(browsing, lab):
    owner, project = lab
    pipe = save_pipeline(
        project, owner, name="drop", spec={"nodes": [{"name": "a", "template": "py", "args": {"code": "1"}}]}
    )
    page = open_editor(browsing, pipe)
    canvas = page.locator("[data-canvas]").bounding_box()
    x, y = centre(node(browsing, "a").locator("rect").first)
    assert x - canvas["x"] < 680

    drag_template(browsing, "py", x - canvas["x"] + 20, y - canvas["y"] + 10)  # onto a, a little off its centre
    expect(node(browsing, "py")).to_be_visible()
    a = node(browsing, "a").locator("rect").first.bounding_box()
    dropped = node(browsing, "py").locator("rect").first.bounding_box()
    apart = (
        dropped["x"] >= a["x"] + a["width"]
        or a["x"] >= dropped["x"] + dropped["width"]
        or dropped["y"] >= a["y"] + a["height"]
        or a["y"] >= dropped["y"] + dropped["height"]
    )
    assert apart, (a, dropped)
    connect(browsing, "a", "py")
    expect(page.locator("[data-canvas] g.x6-edge")).to_have_count(1)
    assert page.evaluate(EDGES_INSIDE_NODES) == []
    browsing.screenshot("dropped")

    # Moving aside is part of the drop: one undo takes the edge, the next the node.
    page.locator("[data-canvas]").focus()
    page.keyboard.press("Control+z")
    expect(page.locator("[data-canvas] g.x6-edge")).to_have_count(0)
    page.keyboard.press("Control+z")
    expect(node(browsing, "py")).to_have_count(0)
    browsing.assert_clean()
