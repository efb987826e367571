from rest_framework.routers import SimpleRouter

from apps.monitoring.api.views import DriftMonitorViewSet, DriftReportViewSet

router = SimpleRouter()
router.register("drift-monitors", DriftMonitorViewSet, basename="driftmonitor")
router.register("drift-reports", DriftReportViewSet, basename="driftreport")
