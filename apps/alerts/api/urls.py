from rest_framework.routers import SimpleRouter

from apps.alerts.api.views import AlertEventViewSet, AlertRuleViewSet, ChannelViewSet, DeliveryViewSet

router = SimpleRouter()
router.register("alert-channels", ChannelViewSet, basename="alert-channel")
router.register("alert-rules", AlertRuleViewSet, basename="alert-rule")
router.register("alert-events", AlertEventViewSet, basename="alert-event")
router.register("alert-deliveries", DeliveryViewSet, basename="alert-delivery")
