"""Websockets of the notebook proxy: every path under a notebook server's base URL."""

from django.urls import re_path

from apps.notebooks.consumers import NotebookProxyConsumer

websocket_urlpatterns = [re_path(r"^notebook/(?P<pk>[0-9]+)/", NotebookProxyConsumer.as_asgi())]
