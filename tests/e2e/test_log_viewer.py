"""The log viewer in a real browser, over a run whose lines the real agent stored (and, on PostgreSQL, indexed on its
own thread): search finds lines in the index and lines not in it yet, and "Jump to first error" shows the line.

Screenshots: test-results/e2e/<test>-<step>.png.
"""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection
from playwright.sync_api import expect

from apps.jobs import consumers, logindex
from apps.jobs import logs as job_logs
from apps.jobs.logs import LogWriter
from apps.jobs.models import LogChunk, LogLine, PipelineRun, TaskRun
from apps.jobs.services import start_run
from tests.e2e.threads import elsewhere
from tests.factories import PASSWORD, pipeline
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# 3,000 lines of training log with two out-of-memory kills and, near the end, a traceback on stderr.
PRINTER = "\n".join(
    [
        "import sys",
        "for i in range(3000):",
        "    print(f'epoch {i // 1000} step {i} loss {1 / (i + 1):.5f}')",
        "    if i in (1234, 2345):",
        "        print(f'worker-{i % 4}: container OOMKilled (exit code 137), restarting')",
        "print('Traceback (most recent call last):', file=sys.stderr)",
        "print('RuntimeError: CUDA out of memory', file=sys.stderr)",
    ]
)


def wait_for_index(run: PipelineRun, lines: int, timeout: float = 20) -> None:
    """The agent's indexer writes the chunks once the task ended: wait for all its lines to be in one (not on SQLite
    without FTS5, where search scans)."""
    if connection.vendor != "postgresql" and not logindex.fts_in_sync(connection.alias):
        return
    task = TaskRun.objects.get(run=run)
    deadline = time.monotonic() + timeout
    while not LogChunk.objects.filter(task=task, last_seq=lines).exists():
        assert time.monotonic() < deadline, "the agent did not index the task's lines"
        time.sleep(0.1)


def test_search_and_jump_to_the_first_error_in_a_stored_log(browsing, live_agent, world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "train", "args": {"code": PRINTER}}], name="oom")
    run = elsewhere(lambda: drive(start_run(pipe, world.alice), timeout=120))
    assert run.status == "succeeded", list(run.tasks.values("node", "status", "reason"))
    assert LogLine.objects.filter(run=run).count() == 3004
    wait_for_index(run, 3004)

    b = browsing
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/runs/{run.pk}/")
    viewer = b.page.locator("[data-log-lines]")
    expect(viewer).to_contain_text("RuntimeError: CUDA out of memory")  # the backlog, to its last line

    search = b.page.locator("[data-log-search]")
    search.get_by_role("searchbox", name="Search the log").fill("oomkilled")
    search.get_by_role("button", name="Search").click()
    results = b.page.locator("[data-log-results-list] li")
    expect(results).to_have_count(2)
    expect(results.nth(0)).to_contain_text("worker-2: container OOMKilled (exit code 137), restarting")
    expect(results.nth(1)).to_contain_text("worker-1: container OOMKilled")
    b.screenshot("1-search")

    search.get_by_role("searchbox", name="Search the log").fill("step 2999 LOSS")
    search.get_by_role("button", name="Search").click()
    expect(results).to_have_count(1)
    expect(results.nth(0)).to_contain_text("epoch 2 step 2999 loss 0.00033")

    b.page.get_by_role("button", name="Jump to first error").click()
    expect(b.page.locator("[data-log-lines] .bg-warning-subtle")).to_contain_text("Traceback (most recent call last):")
    b.screenshot("2-first-error")


def test_the_viewer_gets_lines_the_layer_lost_when_it_reconnects(browsing, world, monkeypatch):
    """Lines published while the channel layer was down never reach the page. When its socket drops and it
    reconnects, the page says which line of each attempt it has, and the server sends what is missing, even a line
    whose id is below the highest id shown (it was stored before a line of another attempt that did arrive)."""
    monkeypatch.setattr(consumers, "CATCH_UP_SECONDS", 3600)  # only the reconnect may fill the gap here
    nodes = [{"name": "a", "args": {"code": "1"}}, {"name": "b", "args": {"code": "2"}}]
    pipe = pipeline(world.project_a, world.alice, nodes)
    run = start_run(pipe, world.alice)
    task_a, task_b = (TaskRun.objects.create(run=run, node=node) for node in ("a", "b"))
    sockets = []

    def through_playwright(ws) -> None:  # forwards both ways; lets the test cut the page's side
        ws.connect_to_server()
        sockets.append(ws)

    b = browsing
    b.page.route_web_socket(re.compile(r".*/ws/runs/\d+/logs/.*"), through_playwright)
    b.log_in("alice", PASSWORD)
    b.goto(f"/p/project-a/runs/{run.pk}/")
    b.wait_for_scripts()
    viewer = b.page.locator("[data-log-lines]")
    write_lines(task_a, ["a first"])
    expect(viewer).to_contain_text("a first")

    real = job_logs.publish
    monkeypatch.setattr(job_logs, "publish", refused)
    write_lines(task_a, ["a lost while the layer was down"])
    monkeypatch.setattr(job_logs, "publish", real)
    write_lines(task_b, ["b first"])
    expect(viewer).to_contain_text("b first")
    expect(viewer).not_to_contain_text("a lost")

    [log_socket] = [ws for ws in sockets if "task=" not in ws.url]  # the run's status socket has `task=0`
    log_socket.close(code=4000, reason="network")  # as a dropped connection: the page reconnects
    expect(viewer).to_contain_text("a lost while the layer was down")
    assert f"seen={task_a.pk}%3A1%2C{task_b.pk}%3A1" in sockets[-1].url
    expect(viewer.locator(".log-line")).to_have_count(3)
    b.screenshot("gap-filled")


def refused(group, message, **kwargs):
    raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def write_lines(task: TaskRun, texts: list[str]) -> None:
    """Store and publish lines as the agent does, off Playwright's thread (see tests/e2e/threads.py)."""

    def write() -> None:
        with LogWriter(task) as writer:
            for text in texts:
                writer.write("0", "stdout", text)

    elsewhere(write)
