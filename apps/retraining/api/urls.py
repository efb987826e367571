from rest_framework.routers import SimpleRouter

from apps.retraining.api.views import (
    DataCheckViewSet,
    DataMonitorViewSet,
    PromotionDecisionViewSet,
    RetrainingViewSet,
    RetrainPolicyViewSet,
)

router = SimpleRouter()
router.register("retrain-policies", RetrainPolicyViewSet, basename="retrainpolicy")
router.register("data-monitors", DataMonitorViewSet, basename="datamonitor")
router.register("data-checks", DataCheckViewSet, basename="datacheck")
router.register("retrainings", RetrainingViewSet, basename="retraining")
router.register("promotion-decisions", PromotionDecisionViewSet, basename="promotiondecision")
