from django.urls import path

from apps.projects.consumers import ProjectEventsConsumer

websocket_urlpatterns = [path("ws/projects/<slug:slug>/events/", ProjectEventsConsumer.as_asgi())]
