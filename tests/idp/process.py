"""Start the test IdP (tests/idp) as a subprocess on a free loopback port, and drive it like a browser would."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import requests

from portal.lib.serve import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Idp:
    """A running test IdP: its base URL and the bearer token of its directory endpoint."""

    url: str
    admin_token: str
    process: subprocess.Popen

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/openid/.well-known/openid-configuration"

    def configure(self, *, client: dict | None = None, users: list[dict] | None = None) -> None:
        body = {"users": users or []} | ({"client": client} if client else {})
        response = requests.post(
            f"{self.url}/directory/", json=body, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=10
        )
        response.raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_idp(folder: Path, timeout: float = 30) -> Idp:
    """Migrate a fresh SQLite database in `folder`, create the signing key, serve, wait for discovery."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.idp.settings",
        "IDP_DB": str(folder / "idp.sqlite3"),
        "IDP_URL": url,
        "IDP_ADMIN_TOKEN": admin_token,
        "IDP_SECRET_KEY": secrets.token_urlsafe(32),
    }
    subprocess.run([sys.executable, "-m", "tests.idp.bootstrap"], cwd=REPO, env=env, check=True, capture_output=True)
    log = (folder / "idp.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    idp = Idp(url, admin_token, process)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(idp.discovery_url, timeout=1).ok:
                return idp
        except requests.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            idp.stop()
            raise RuntimeError(f"the test IdP did not start; see {folder / 'idp.log'}")
        time.sleep(0.05)


class FormInputs(HTMLParser):
    """The name/value pairs of a page's <input> elements (the IdP's consent form)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "input" and attributes.get("name") and attributes.get("type") in ("hidden", None):
            self.values[attributes["name"]] = attributes.get("value") or ""


def form_inputs(html: str) -> dict[str, str]:
    parser = FormInputs()
    parser.feed(html)
    return parser.values
