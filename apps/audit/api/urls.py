from rest_framework.routers import SimpleRouter

from apps.audit.api.views import AuditEntryViewSet

router = SimpleRouter()
router.register("audit", AuditEntryViewSet, basename="auditentry")
