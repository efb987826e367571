from rest_framework.routers import SimpleRouter

from apps.appstore.api.views import AppViewSet, InstallationViewSet

router = SimpleRouter()
router.register("apps", AppViewSet, basename="app")
router.register("installations", InstallationViewSet, basename="installation")
