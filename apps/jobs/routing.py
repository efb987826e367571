from django.urls import path

from apps.accounts.wsauth import TokenAuthMiddleware
from apps.jobs.consumers import RunLogConsumer

# API tokens may follow a run's log (the `portal runs logs -f` command): the consumer narrows by the token's project.
websocket_urlpatterns = [path("ws/runs/<int:run_id>/logs/", TokenAuthMiddleware(RunLogConsumer.as_asgi()))]
