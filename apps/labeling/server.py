"""Which Label Studio the portal talks to, and with which token.

- `LABELING=off`: none; every labeling call says labeling is off.
- `LABEL_STUDIO_URL` (+ `LABEL_STUDIO_TOKEN` or `LABEL_STUDIO_TOKEN_FILE`): an existing server.
- otherwise the local one `make run` starts (`manage.py runlabelstudio`), whose address and token the
  LabelStudioServer row holds, encrypted, once it is provisioned.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.labeling import launch
from apps.labeling.client import LabelStudio, LabelStudioUnavailable
from apps.labeling.models import LabelStudioServer

ADMIN_EMAIL = "portal-admin@labelstudio.local"


def enabled() -> bool:
    return settings.LABELING != "off"


def external() -> bool:
    return bool(settings.LABEL_STUDIO_URL)


def connect() -> LabelStudio:
    """A client for the configured server, or LabelStudioUnavailable saying why there is none."""
    if not enabled():
        raise LabelStudioUnavailable(_("Labeling is off on this portal (LABELING=off)."))
    if external():
        if not settings.LABEL_STUDIO_TOKEN:
            raise LabelStudioUnavailable(
                _("LABEL_STUDIO_URL is set but no token: set LABEL_STUDIO_TOKEN or LABEL_STUDIO_TOKEN_FILE.")
            )
        return LabelStudio(settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN)
    row = LabelStudioServer.objects.filter(key=LabelStudioServer.LOCAL).first()
    if row is None or row.provisioned_at is None or not row.token:
        raise LabelStudioUnavailable(_("Label Studio is starting: it has not been provisioned yet."))
    return LabelStudio(row.url, row.token)


def local_server() -> launch.LocalServer:
    """The local server's settings, made (with a new admin password and token, stored encrypted) on first use."""
    url = f"http://127.0.0.1:{settings.LABEL_STUDIO_PORT}"
    row, created = LabelStudioServer.objects.get_or_create(
        key=LabelStudioServer.LOCAL,
        defaults={"url": url, "email": ADMIN_EMAIL, "password": launch.new_token(), "token": launch.new_token()},
    )
    if not created and row.url != url:  # the port changed: same account, new address
        row.url = url
        row.save(update_fields=["url"])
    return launch.LocalServer(
        venv=settings.LABEL_STUDIO_VENV,
        data_dir=settings.LABEL_STUDIO_DATA_DIR,
        port=settings.LABEL_STUDIO_PORT,
        email=row.email,
        password=row.password,
        token=row.token,
    )


def mark_provisioned(version: dict[str, Any]) -> None:
    label_studio = version.get("label-studio-os-package", {}) if isinstance(version, dict) else {}
    LabelStudioServer.objects.filter(key=LabelStudioServer.LOCAL).update(
        provisioned_at=timezone.now(), version=str(label_studio.get("version", version.get("release", "")))[:50]
    )


def state() -> dict[str, Any]:
    """For /readyz and the pages: {"enabled", "url", "ok", "detail"} — never raises, never shows the token."""
    if not enabled():
        return {"enabled": False, "url": "", "ok": False, "detail": _("Labeling is off (LABELING=off).")}
    try:
        client = connect()
    except LabelStudioUnavailable as exc:
        return {"enabled": True, "url": settings.LABEL_STUDIO_URL, "ok": False, "detail": str(exc)}
    with client:
        up = client.health()
    detail = (
        _("Label Studio answers.") if up else _("Label Studio at %(url)s is down or starting.") % {"url": client.url}
    )
    return {"enabled": True, "url": client.url, "ok": up, "detail": detail}
