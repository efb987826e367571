"""All websocket routes, gathered from each app's routing module."""

from apps.accounts.routing import websocket_urlpatterns as accounts_ws
from apps.jobs.routing import websocket_urlpatterns as jobs_ws
from apps.notebooks.routing import websocket_urlpatterns as notebooks_ws
from apps.projects.routing import websocket_urlpatterns as projects_ws

websocket_urlpatterns = [*accounts_ws, *jobs_ws, *notebooks_ws, *projects_ws]
