"""Live notification count: the websocket that proves HTTP, Channels and the layer are wired."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.services import unread_count, user_group

CLOSE_UNAUTHENTICATED = 4401


class NotificationConsumer(AsyncJsonWebsocketConsumer):
    """Sends `{"unread": n}` on connect and whenever the user's unread count changes."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Accept, then close with an application code: the browser then knows not to retry.
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"unread": await database_sync_to_async(unread_count)(user)})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def unread_count(self, event: dict[str, Any]) -> None:
        await self.send_json({"unread": event["unread"]})
