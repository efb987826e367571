"""Live pages in a real browser: a run's page follows the run to its end and a notebook's and a service's page
follow their state, all over websockets, without ever reloading.

Each test marks the page's window after it loads (`window.__marker`): a reload would drop it. State changes made by
the test happen on another thread: this one holds Playwright's event loop, from which nothing can be published.
Screenshots: test-results/e2e/<test>-<step>.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.jobs.models import PipelineRun, ResourceSample
from apps.jobs.services import start_run
from apps.notebooks import services as notebooks
from apps.runtime.workload import Phase
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services import rollout
from tests.e2e.threads import elsewhere
from tests.factories import PASSWORD, pipeline
from tests.jobs.conftest import drive
from tests.notebooks.factories import notebook
from tests.serving.replicas import make_service

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# A task that holds ~40 MB and runs for about three seconds: long enough for the agent's samples (one a second).
WORK = "\n".join(
    ["import time", "held = bytearray(40_000_000)", "for i in range(6):", "    print('step', i, flush=True)",
     "    time.sleep(0.5)"]
)  # fmt: skip


def mark(b) -> None:
    b.page.evaluate("window.__marker = 1")


def assert_not_reloaded(b) -> None:
    assert b.page.evaluate("window.__marker") == 1, "the page reloaded"


def test_the_run_page_follows_a_short_run_to_its_end_without_reloading(browsing, live_agent, world):
    pipe = pipeline(
        world.project_a,
        world.alice,
        [
            {"name": "prepare", "args": {"code": WORK}},
            {"name": "train", "depends_on": ["prepare"], "args": {"code": WORK}},
        ],
        name="live",
    )
    run = start_run(pipe, world.alice)
    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/runs/{run.pk}/")
    expect(b.page.locator("#run-status [data-status]")).to_have_attribute("data-status", re.compile("queued|running"))
    expect(b.page.get_by_role("button", name="Cancel")).to_be_visible()
    expect(b.page.locator("[data-usage-note]")).to_contain_text("No samples yet")
    mark(b)
    b.screenshot("1-queued")

    run = elsewhere(lambda: drive(PipelineRun.objects.get(pk=run.pk), timeout=120))
    assert run.status == "succeeded", list(run.tasks.values("node", "status", "reason"))

    # The end, in place: the final status and progress, the finished run's actions instead of Cancel, timings.
    expect(b.page.locator("#run-status [data-status]")).to_have_attribute("data-status", "succeeded")
    expect(b.page.locator("#run-progress-text")).to_have_text("2/2 nodes done")
    expect(b.page.locator("#run-progress .progress-bar")).to_have_class(re.compile("bg-success"))
    expect(b.page.get_by_role("button", name="Re-run from here")).to_have_count(2)
    expect(b.page.get_by_role("button", name="Cancel")).to_have_count(0)
    for node in ["prepare", "train"]:
        expect(b.page.locator(f"#node-{node} td").nth(4)).not_to_have_text("—")  # its duration
    # The resource usage: both tasks' samples, drawn by ECharts.
    assert ResourceSample.objects.filter(task__run=run).exists()
    expect(b.page.locator("[data-usage-charts]")).to_be_visible()
    expect(b.page.locator('[data-usage="cpu"] canvas')).to_have_count(1)
    expect(b.page.locator("[data-usage-note]")).to_contain_text("samples")
    expect(b.page.locator("[data-usage-note]")).not_to_contain_text("updating")
    assert_not_reloaded(b)
    b.page.locator("#run-usage").scroll_into_view_if_needed()
    b.screenshot("2-succeeded")


def test_the_run_page_tells_the_truth_while_it_runs_and_when_it_fails(browsing, live_agent, world):
    """Issue 26.2: a running node counts as running beside the bar, its duration and the run's elapsed time tick,
    and a failed run ends with a red bar (not a full blue one)."""
    slow = "import time\nprint('working', flush=True)\ntime.sleep(8)"
    pipe = pipeline(
        world.project_a,
        world.alice,
        [
            {"name": "slow", "args": {"code": slow}},
            {"name": "broken", "depends_on": ["slow"], "args": {"code": "raise SystemExit(3)"}},
        ],
        name="truthful",
    )
    run = start_run(pipe, world.alice)
    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/runs/{run.pk}/")
    b.wait_for_scripts()
    mark(b)

    elsewhere(lambda: drive(PipelineRun.objects.get(pk=run.pk), timeout=120, until=lambda r: r.tasks.filter(
        node="slow", status="running").exists()))  # fmt: skip
    expect(b.page.locator("#run-progress-text")).to_have_text("0/2 nodes done · 1 running")
    duration = b.page.locator("#node-slow [data-field=duration]")
    expect(duration).to_have_attribute("data-elapsed", re.compile(r"\d"))
    first = duration.inner_text()
    expect(duration).not_to_have_text(first)  # it ticks, without a message from the server
    expect(b.page.locator("#run-elapsed")).to_have_text(re.compile(r"\d+\.\d s|\d+ min"))
    b.screenshot("1-running")

    run = elsewhere(lambda: drive(PipelineRun.objects.get(pk=run.pk), timeout=120))
    assert run.status == "failed", list(run.tasks.values("node", "status", "reason"))
    expect(b.page.locator("#run-status [data-status]")).to_have_attribute("data-status", "failed")
    expect(b.page.locator("#run-progress .progress-bar")).to_have_class(re.compile("bg-danger"))
    expect(b.page.locator("#run-progress-text")).to_have_text("2/2 nodes done")
    expect(b.page.locator("#run-elapsed")).not_to_have_attribute("data-elapsed", re.compile("."))
    assert_not_reloaded(b)
    b.screenshot("2-failed")


def test_the_notebook_pages_follow_a_start_and_a_stop_without_reloading(browsing, world):
    nb = notebook(world.project_a, world.alice, status="starting", handle="server-1")
    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/notebooks/{nb.pk}/")
    expect(b.page.locator("#notebook-status [data-status]")).to_have_attribute("data-status", "starting")
    mark(b)
    elsewhere(lambda: notebooks.mark_running(nb.pk, "server-1"))
    expect(b.page.locator("#notebook-status [data-status]")).to_have_attribute("data-status", "running")
    expect(b.page.locator("#notebook-status").get_by_role("link", name="Open")).to_be_visible()  # the owner's action
    assert_not_reloaded(b)
    b.screenshot("1-detail-running")

    b.goto("/p/project-a/notebooks/")
    row = b.page.locator(f'tr[data-notebook="{nb.pk}"]')
    expect(row.locator("[data-status]")).to_have_attribute("data-status", "running")
    mark(b)
    elsewhere(lambda: notebooks.record_end(nb.pk, "server-1", Phase.CANCELLED))  # stopped from the outside
    expect(row.locator("[data-status]")).to_have_attribute("data-status", "stopped")
    assert_not_reloaded(b)
    b.screenshot("2-list-stopping")


def test_the_service_page_follows_a_rollout_and_redraws_what_serves_without_reloading(browsing, world):
    service = make_service(world.project_a)
    revision = Revision.objects.create(service=service, number=1, status=Revision.Status.ROLLING_OUT)
    InferenceService.objects.filter(pk=service.pk).update(status=InferenceService.Status.DEPLOYING)
    replica = Replica.objects.create(revision=revision, index=0, status=Replica.Status.STARTING, handle="h1",
                                     upstream="http://127.0.0.1:9")  # fmt: skip
    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/services/{service.pk}/")
    expect(b.page.locator('#service-status [data-rollout="1"]')).to_be_visible()
    expect(b.page.locator("#service-revisions")).to_contain_text("r1")
    expect(b.page.locator("#service-canary")).to_have_count(1)
    expect(b.page.locator("#service-canary form")).to_have_count(0)  # nothing serves: no canary yet
    mark(b)
    b.screenshot("1-rolling-out")

    elsewhere(lambda: rollout.mark_ready(replica.pk))

    expect(b.page.locator('#service-status [data-rollout="1"]')).to_have_count(0)
    expect(b.page.locator("#service-status")).to_contain_text("serving r1")
    # Settled: the parts drawn from what serves came again from the server.
    expect(b.page.get_by_role("button", name="Deploy canary")).to_be_visible()
    expect(b.page.locator("[data-console-note]")).not_to_contain_text("No replica is ready")
    assert_not_reloaded(b)
    b.screenshot("2-ready")
