"""A project's live events for its pages: notebook and service status changes (apps/projects/events.py)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.projects.events import project_group
from apps.projects.models import Project

# The run-log socket's codes (apps/jobs/consumers.py): the browser knows from them not to retry.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


@database_sync_to_async
def visible_project_id(user: Any, slug: str) -> int | None:
    """The project's id when the user may see it (a member), else None: the pages' own rule (projects.access)."""
    return Project.objects.for_user(user).filter(slug=slug).values_list("pk", flat=True).first()


class ProjectEventsConsumer(AsyncJsonWebsocketConsumer):
    """`ws/projects/<slug>/events/`: sends `{"type": "ready"}` once it has joined the project's group, then each
    event as `{"type": <kind>, "id": ..., "status": ..., ...}` ("notebook", "service").

    The events only say that something changed; the pages re-fetch their fragments, which apply the viewer's
    permissions. Idle sockets stay open: the Redis layer is configured without a read timeout (settings,
    channels_redis#422), and the SQLite layer has none.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.reject(CLOSE_UNAUTHENTICATED)
            return
        project_id = await visible_project_id(user, self.scope["url_route"]["kwargs"]["slug"])
        # A missing project and another team's project get the same answer: never reveal that one exists.
        if project_id is None:
            await self.reject(CLOSE_NOT_FOUND)
            return
        self.group = project_group(project_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Joined: events from now on arrive. A page that reconnects re-fetches what it shows, for those it missed.
        await self.send_json({"type": "ready"})

    async def reject(self, code: int) -> None:
        # Accept, then close with an application code: the browser then knows why and not to retry.
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The browser has nothing to say."""

    async def project_event(self, event: dict[str, Any]) -> None:
        payload = {key: value for key, value in event.items() if key not in ("type", "kind")}
        await self.send_json({**payload, "type": event["kind"]})
