from django.urls import path

from apps.jobs.consumers import RunLogConsumer

websocket_urlpatterns = [path("ws/runs/<int:run_id>/logs/", RunLogConsumer.as_asgi())]
