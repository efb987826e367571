"""ASGI entry point: Django for HTTP (dataset upload chunks streamed; /serving/… answered by the serving router
before Django), Channels consumers for websockets under /ws/."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: consumers import models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.datasets.asgi import ChunkUploadRoute  # noqa: E402
from apps.models.mlflow_api.asgi import MlflowApiRoute  # noqa: E402
from apps.serving.router.asgi import ServingRoute  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Upload chunks (PATCH) stream into their partial file instead of being spooled first; inference requests
        # (/serving/…) go to the serving router without Django's middleware (apps/serving/router); the MLflow API
        # runs Django's on threads that keep their database connections (apps/models/mlflow_api/asgi.py).
        "http": ServingRoute(MlflowApiRoute(ChunkUploadRoute(django_asgi_app))),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# What is loaded by now lives as long as the process: out of the garbage collector's way. Its full collections walked
# all of Django: while a task's lines streamed (bench/logs.py), one stalled every websocket for 100-200 ms.
gc.freeze()
