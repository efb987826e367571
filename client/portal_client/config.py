"""Where `portal login` keeps tokens: one per server, in the user's config folder, readable by the user only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from portal_client.errors import PortalError


def config_dir() -> Path:
    """$PORTAL_CONFIG_DIR, else $XDG_CONFIG_HOME/portal, else ~/.config/portal (%APPDATA%\\portal on Windows)."""
    if os.environ.get("PORTAL_CONFIG_DIR"):
        return Path(os.environ["PORTAL_CONFIG_DIR"])
    if os.name == "nt" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "portal"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "portal"


def config_file() -> Path:
    return config_dir() / "credentials.json"


def load() -> dict[str, Any]:
    path = config_file()
    if not path.exists():
        return {"default": None, "servers": {}}
    return json.loads(path.read_text())


def save(data: dict[str, Any]) -> Path:
    """Written to a new file created 0600 and moved into place: the token is never readable by others, not even
    for a moment."""
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = config_file()
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return path


LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def normalise(url: str) -> str:
    """The portal's base URL: no trailing slash; without a scheme, http:// for this machine (what `make run`
    serves) and https:// for any other host."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        host = url.split("/", 1)[0]
        host = host.split("]", 1)[0] + "]" if host.startswith("[") else host.rsplit(":", 1)[0]
        scheme = "http" if host in LOOPBACK or host.startswith("127.") else "https"
        url = f"{scheme}://{url}"
    return url


def store(url: str, token: str, username: str = "") -> Path:
    data = load()
    url = normalise(url)
    data.setdefault("servers", {})[url] = {"token": token, "username": username}
    data["default"] = url
    return save(data)


def forget(url: str) -> bool:
    data = load()
    url = normalise(url)
    found = data.get("servers", {}).pop(url, None) is not None
    if data.get("default") == url:
        data["default"] = next(iter(data["servers"]), None)
    save(data)
    return found


def resolve(server: str | None = None) -> tuple[str, str | None]:
    """(url, token): PORTAL_URL/PORTAL_TOKEN win (CI), then the server given, then the default login."""
    url = server or os.environ.get("PORTAL_URL")
    token = os.environ.get("PORTAL_TOKEN")
    data = load()
    if url is None:
        url = data.get("default")
    if url is None:
        raise PortalError("No portal to talk to: run `portal login URL`, or set PORTAL_URL and PORTAL_TOKEN.")
    url = normalise(url)
    if token is None:
        token = data.get("servers", {}).get(url, {}).get("token")
    return url, token
