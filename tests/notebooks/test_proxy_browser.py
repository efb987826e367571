"""JupyterLab in a real browser through the proxy: the page renders under the proxy's headers (no script refused,
no request failing or leaving the portal), and a notebook cell computes 1+1 over the proxied kernel socket.

Debian's Chromium driven by Playwright, as in tests/e2e (needs /usr/bin/chromium and the `playwright` package of
requirements-dev.txt; never `playwright install`). Skipped, saying why, when either is missing.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from tests.notebooks.jupyter import JupyterServer, jupyter, running_notebook  # noqa: F401 (a fixture)

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the skip below says what to install
    sync_playwright = None

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

pytestmark = [
    pytest.mark.live,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(sync_playwright is None, reason="the playwright package is missing (requirements-dev.txt)"),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM}: apt-get install chromium"),
]


def test_jupyterlab_renders_and_runs_a_cell_in_a_browser(live_asgi, world, jupyter: JupyterServer, monkeypatch):  # noqa: F811
    notebook = running_notebook(jupyter, world.project_a, world.alice)
    client = Client()
    client.force_login(world.alice)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    # Playwright's sync API runs an event loop on this thread while it is started (see tests/e2e/conftest.py).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    problems: dict[str, list[str]] = {"console errors": [], "failed requests": [], "other hosts": [], "5xx": []}
    portal = f"{live_asgi.host}:{live_asgi.port}"

    def on_request(request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and f"{parts.hostname}:{parts.port}" != portal:
            problems["other hosts"].append(request.url)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_asgi.url}])
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and problems["console errors"].append(m.text))
            page.on("requestfailed", lambda r: problems["failed requests"].append(f"{r.method} {r.url} {r.failure}"))
            page.on("response", lambda r: r.status >= 500 and problems["5xx"].append(f"{r.status} {r.url}"))
            page.on("request", on_request)

            page.goto(f"{live_asgi.url}{notebook.base_path}lab")
            page.wait_for_selector(".jp-Launcher", timeout=60_000)  # JupyterLab's scripts ran and built the shell
            assert page.title() == "JupyterLab"
            page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
            # The kernel's status reaches the status bar over the proxied socket: "Idle" means the relay works.
            page.get_by_text("Python 3 (ipykernel) | Idle").first.wait_for(timeout=120_000)
            editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
            editor.click()
            page.keyboard.type("1+1")
            page.keyboard.press("Shift+Enter")
            output = page.locator(".jp-OutputArea-output").first
            output.wait_for(timeout=60_000)
            assert output.inner_text() == "2"
        finally:
            browser.close()
            for path in jupyter.root.glob("*.ipynb"):
                path.unlink()

    assert not any(problems.values()), problems
