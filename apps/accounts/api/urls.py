from rest_framework.routers import SimpleRouter

from apps.accounts.api.views import ApiTokenViewSet, NotificationViewSet

router = SimpleRouter()
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("notifications", NotificationViewSet, basename="notification")
