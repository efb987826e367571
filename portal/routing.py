"""All websocket routes, gathered from each app's routing module."""

from apps.accounts.routing import websocket_urlpatterns as accounts_ws

websocket_urlpatterns = [*accounts_ws]
