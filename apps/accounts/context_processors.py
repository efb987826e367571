from typing import Any

from django.http import HttpRequest

from apps.accounts.services import unread_count


def notifications(request: HttpRequest) -> dict[str, Any]:
    """The unread count for the navbar badge (kept live by the notifications websocket)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"unread_notifications": unread_count(user)}
