"""What `make run` starts (the Procfile under honcho) serves the login page and the demo login works.

Runs the embedded default in a fresh var/ folder: SQLite, folder broker, SQLite channel layer.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.conf import settings

from portal.lib.serve import free_port

pytestmark = [pytest.mark.live, pytest.mark.smoke]


def fetch(opener, url: str, data: dict | None = None) -> tuple[int, str, str]:
    body = urlencode(data).encode() if data is not None else None
    with opener.open(url, data=body, timeout=10) as response:
        return response.status, response.geturl(), response.read().decode()


@pytest.fixture
def portal(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(PORTAL_VAR_DIR=str(tmp_path), PORTAL_PORT=str(port), DEMO_PASSWORD="procfile-demo-password")
    env.setdefault("SECRET_KEY", settings.SECRET_KEY)
    python = sys.executable
    for args in (["migrate", "--noinput"], ["migrate", "--noinput", "--database", "channels"], ["demo"]):
        subprocess.run([python, "manage.py", *args], cwd=settings.BASE_DIR, env=env, check=True, capture_output=True)
    honcho = Path(python).with_name("honcho")
    proc = subprocess.Popen(
        [str(honcho), "-f", "Procfile", "start"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2)
            break
        except OSError:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the web process did not answer within 60 s"
            time.sleep(0.3)
    yield base
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def test_the_procfile_serves_the_login_page_and_the_demo_login_works(portal):
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    status, _url, html = fetch(opener, f"{portal}/accounts/login/")
    assert status == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    status, url, html = fetch(
        opener,
        f"{portal}/accounts/login/",
        {"csrfmiddlewaretoken": token, "username": "demo", "password": "procfile-demo-password"},
    )
    assert status == 200
    assert url == f"{portal}/"
    assert "Demo" in html
    assert "Your projects" in html
    status, _url, body = fetch(opener, f"{portal}/readyz")
    assert '"status": "ready"' in body
