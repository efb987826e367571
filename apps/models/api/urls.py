from rest_framework.routers import SimpleRouter

from apps.models.api.views import (
    ExperimentViewSet,
    ModelAliasViewSet,
    ModelVersionViewSet,
    RegisteredModelViewSet,
    TrackingRunViewSet,
)

router = SimpleRouter()
router.register("experiments", ExperimentViewSet, basename="experiment")
router.register("tracking-runs", TrackingRunViewSet, basename="trackingrun")
router.register("registered-models", RegisteredModelViewSet, basename="registeredmodel")
router.register("model-versions", ModelVersionViewSet, basename="modelversion")
router.register("model-aliases", ModelAliasViewSet, basename="modelalias")
