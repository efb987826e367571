"""End-to-end tests in a real browser: Debian's Chromium driven by Playwright against the portal served by uvicorn
(HTTP and websockets) on loopback.

Needs /usr/bin/chromium (`apt-get install -y chromium`) and the `playwright` package (requirements-dev.txt);
never `playwright install`, which downloads a browser of its own. Skipped, saying why, when either is missing.
Every page the tests open is watched: console errors, uncaught exceptions, failed requests and any request to
another host fail the test. Screenshots go to test-results/e2e/.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connections

from tests.jobs.conftest import AgentProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "test-results" / "e2e"
EXPECT_SECONDS = 30
logger = logging.getLogger(__name__)

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the skip below says what to install
    sync_playwright = None


def pytest_collection_modifyitems(config, items) -> None:
    reason = None
    if sync_playwright is None:
        reason = "the playwright package is missing: pip install -r requirements-dev.txt"
    elif not os.access(CHROMIUM, os.X_OK):
        reason = f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def live_agent(live_asgi, tmp_path, settings) -> Iterator[AgentProcess]:
    """The local agent (a process of its own) that runs the tasks, publishing to the live server's channel layer.

    Without Redis the layer is a SQLite database under PORTAL_VAR_DIR, and a test's is `test-channels.sqlite3`:
    the agent gets a folder of its own whose `channels.sqlite3` is that file, so that the node states and log
    lines it reports reach the browser as they would in production (tests/jobs' `agent` fixture's would not).
    """
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url  # where tasks reach the API (tracking, model registry)
    # The dataset versions the tasks read, and the API the nodes it dispatches are told about.
    env = {"MEDIA_ROOT": str(settings.MEDIA_ROOT), "SITE_URL": live_asgi.url}
    if "channels" in connections.databases:
        var = tmp_path / "agent-var"
        var.mkdir()
        # Absolute: with a relative PORTAL_VAR_DIR (var/test-…) the link would point inside agent-var itself.
        (var / "channels.sqlite3").symlink_to(Path(connections["channels"].settings_dict["NAME"]).resolve())
        env["PORTAL_VAR_DIR"] = str(var)
    process = AgentProcess(tmp_path, env=env)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def live_workers(live_asgi) -> Iterator[None]:
    """What the Celery worker and beat do in production, done in the test process: tasks the live server queues
    run at once in the request that queued them (Celery's eager mode: a dataset version's analysis, a run's first
    dispatch), and a thread runs the level-triggered reconcile passes of runs and services (starting replicas probed
    until ready; what the agent process queues is left to them) every half second instead of every 10 s.

    Not a Celery worker process: with Redis (CI) or the folder broker every test process shares one queue, and a
    worker would take other tests' tasks and run them against this test's database.
    """
    from apps.jobs import orchestrator
    from apps.serving.services import rollout
    from portal.celery import app

    stop = threading.Event()

    def passes() -> None:
        try:
            while not stop.is_set():
                for reconcile in (orchestrator.reconcile, rollout.reconcile):
                    try:
                        reconcile()
                    except Exception:  # what a periodic task does too: log, and try again next time
                        logger.exception("%s failed", reconcile.__qualname__)
                stop.wait(0.5)
        finally:
            connections.close_all()

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    thread = threading.Thread(target=passes, name="e2e-beat", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)
    app.conf.task_always_eager = eager


@dataclass
class Watch:
    """What went wrong in the browser while a test ran."""

    origin: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    other_hosts: list[str] = field(default_factory=list)
    bodiless: set = field(default_factory=set)  # requests answered with no body by definition (HEAD, 204, 304)
    page_loads: int = 0  # documents the page committed to (a navigation's new page replacing the old one)
    sent_during: dict = field(default_factory=dict)  # request → page_loads when it was sent
    aborted: list = field(default_factory=list)  # requests Chromium cancelled (see on_request_failed)

    def on_request(self, request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and f"{parts.hostname}:{parts.port}" != self.origin:
            self.other_hosts.append(request.url)
        self.sent_during[request] = self.page_loads

    def on_frame_navigated(self, frame) -> None:
        """Counted when the new document commits, not when its navigation starts: until then the old page's
        scripts still run and send requests, which the commit then cancels."""
        if frame.parent_frame is None:
            self.page_loads += 1

    def on_response(self, response) -> None:
        if response.request.method == "HEAD" or response.status in (204, 304):
            self.bodiless.add(response.request)

    def on_request_failed(self, request) -> None:
        """net::ERR_ABORTED is Chromium cancelling a request, not a request failing: kept unless the answer came
        without a body by definition (Chromium reports those aborted once their headers arrived, playwright#32752),
        it was a page load that another one replaced, or the page it was loading for was left meanwhile (a click
        while scripts still load, a page reloading itself). Which it was is decided at the end (`problems`): the
        navigation that cut a fetch off can be reported after the fetch's failure."""
        if request.failure == "net::ERR_ABORTED":
            if request not in self.bodiless and not request.is_navigation_request():
                self.aborted.append(request)
            return
        self.failed_requests.append(f"{request.method} {request.url}: {request.failure}")

    def problems(self) -> dict[str, list[str]]:
        cut_short = [  # cancelled although the page that sent them stayed: a request the page itself gave up
            f"{r.method} {r.url}: {r.failure}" for r in self.aborted if self.sent_during.get(r, 0) == self.page_loads
        ]
        found = {
            "console errors": self.console_errors,
            "uncaught exceptions": self.page_errors,
            "failed requests": self.failed_requests + cut_short,
            "requests to other hosts": self.other_hosts,
        }
        return {kind: items for kind, items in found.items() if items}


@dataclass
class Browsing:
    """A browser page on the live server, with its watch and a screenshot helper."""

    page: Page
    base_url: str
    watch: Watch
    name: str

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path)  # returns once the page's load event fired: its scripts have run

    def wait_for_scripts(self) -> None:
        """Until the current document's scripts have all run (its load event: the deferred /jsi18n/ catalogue,
        portal.js's handlers such as the switcher's auto-submit, the page's own). Call it once the new page is
        known to be there (something only it has: an attribute, a URL, a text) before calling a page's functions
        or using a control its scripts drive: on a loaded machine those scripts arrive well after the HTML.
        Waits for the page's own state, never for a time."""
        self.page.wait_for_load_state("load")
        self.page.wait_for_function("document.readyState === 'complete'")

    def screenshot(self, step: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{self.name}-{step}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_clean(self) -> None:
        assert not self.watch.problems(), self.watch.problems()

    def log_in(self, username: str, password: str) -> None:
        self.goto("/accounts/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()
        assert "/accounts/login/" not in self.page.url, "the login failed"


@pytest.fixture
def browsing(request, live_asgi, monkeypatch) -> Iterator[Browsing]:
    """A fresh Chromium on the live server, for one test. The test fails if a page logged an error, threw, or a
    request failed or left the server."""
    # Playwright's sync API runs an event loop on this thread for as long as it is started, and Django refuses
    # ORM calls from a thread with a running loop unless told they are safe (the test's own queries between
    # browser steps are). So the browser lives for one test only: the loop must not outlive it.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    watch = Watch(origin=f"{live_asgi.host}:{live_asgi.port}")
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)
    failed = True
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 950})
        context.set_default_timeout(15_000)
        # How long `expect` waits for the page to get where a test says it will (Playwright's default: 5 s). What
        # it waits for is the page's own state, never a time; 5 s was too short on a loaded machine (a backlog of
        # 3,000 log lines, a page's scripts still loading beside another test run).
        expect.set_options(timeout=EXPECT_SECONDS * 1000)
        page = context.new_page()
        page.on("console", lambda message: message.type == "error" and watch.console_errors.append(message.text))
        page.on("pageerror", lambda error: watch.page_errors.append(str(error)))
        page.on("requestfailed", watch.on_request_failed)
        page.on("request", watch.on_request)
        page.on("response", watch.on_response)
        page.on("framenavigated", watch.on_frame_navigated)
        browsing = Browsing(page=page, base_url=live_asgi.url, watch=watch, name=name)
        problems: dict[str, list[str]] = {}
        try:
            yield browsing
            failed = getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed
            if failed:
                browsing.screenshot("failure")
            problems = watch.problems()  # before closing, which cancels what the page still had in flight
        finally:
            context.close()
            browser.close()
    if not failed:
        assert not problems, problems


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
