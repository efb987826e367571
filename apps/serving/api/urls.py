from rest_framework.routers import SimpleRouter

from apps.serving.api.views import InferenceServiceViewSet, RevisionViewSet

router = SimpleRouter()
router.register("services", InferenceServiceViewSet, basename="inferenceservice")
router.register("revisions", RevisionViewSet, basename="revision")
