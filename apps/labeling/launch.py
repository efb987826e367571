"""How a local Label Studio server is started: its command line, its environment, and waiting until it answers.

Used by `manage.py runlabelstudio` (the `labelstudio` process of `make run`) and by the tests' session fixture, so
both run the server the same way. Secrets (the admin's password and token) travel in the environment, which only
the same user can read, never on the command line that `ps` shows to everyone.

Measured facts (docs/labeling.md): `label-studio` without a subcommand starts a server on 0.0.0.0:8080, so only
`start` is ever run, with `--internal-host 127.0.0.1`; the first start migrates its SQLite database (~45 s, longer on
a busy host), later ones take ~5 s; a fresh organization refuses legacy tokens unless `--enable-legacy-api-token`
was given when the organization was made (on the first start: it is given every time, harmlessly); webhooks and ML
backends on loopback are refused unless SSRF_PROTECTION_ENABLED and ML_BLOCK_LOCAL_IP are false.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class LocalServer:
    """What it takes to start one local server."""

    venv: Path
    data_dir: Path
    port: int
    email: str
    password: str
    token: str
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def executable(self) -> Path:
        return self.venv / "bin" / "label-studio"

    def command(self) -> list[str]:
        return [
            str(self.executable),
            "start",  # never without a subcommand: that starts a server on 0.0.0.0:8080
            "--no-browser",
            "--internal-host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--enable-legacy-api-token",
        ]

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = {key: value for key, value in (base or os.environ).items() if not key.startswith(("DJANGO_", "PORTAL_"))}
        # The portal's own settings must not leak into Label Studio's Django (its own DATABASE_URL, SECRET_KEY…).
        for key in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "SECRET_KEY_FILE", "VIRTUAL_ENV", "PYTHONPATH"):
            env.pop(key, None)
        env.update(
            {
                "LABEL_STUDIO_BASE_DATA_DIR": str(self.data_dir),
                "SECRET_KEY": secret_key(self.data_dir),
                "LATEST_VERSION_CHECK": "false",
                "COLLECT_ANALYTICS": "false",
                "SENTRY_DSN": "",
                "FRONTEND_SENTRY_DSN": "",
                # Webhooks to the portal and the portal's ML-backend views live on loopback.
                "SSRF_PROTECTION_ENABLED": "false",
                "ML_BLOCK_LOCAL_IP": "false",
                "LABEL_STUDIO_HOST": self.url,
                "LABEL_STUDIO_USERNAME": self.email,
                "LABEL_STUDIO_PASSWORD": self.password,
                "LABEL_STUDIO_USER_TOKEN": self.token,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def start(self, *, stdout=None) -> subprocess.Popen:
        if not self.executable.exists():
            raise FileNotFoundError(f"{self.executable} is missing: run `make labelstudio-env`")
        if port_in_use(self.host, self.port):
            # Label Studio would quietly move to the next free port (server._get_free_port): refuse instead.
            raise OSError(f"port {self.port} on {self.host} is already in use")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            self.command(),
            cwd=self.data_dir,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            start_new_session=True,
        )


def secret_key(data_dir: Path) -> str:
    """Label Studio's own SECRET_KEY, made once and kept in its data folder (mode 600)."""
    path = data_dir / "secret_key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def new_token() -> str:
    """A legacy API token as Label Studio makes them (40 hex characters)."""
    return secrets.token_hex(20)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_ready(url: str, token: str, *, timeout: float, process: subprocess.Popen | None = None) -> dict:
    """Poll /health until it answers, then check that the token is accepted; returns /api/version's answer."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=5) as http:
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"Label Studio exited with code {process.returncode} while starting")
            try:
                if http.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Label Studio at {url} did not answer /health within {timeout:g} s")
            time.sleep(0.5)
        # /api/version answers anyone: whoami proves the token works.
        answer = http.get("/api/current-user/whoami", headers={"Authorization": f"Token {token}"})
        if answer.status_code != 200:
            raise PermissionError(f"Label Studio at {url} refused the portal's token ({answer.status_code})")
        return http.get("/api/version").json()
