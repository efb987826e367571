from rest_framework.routers import SimpleRouter

from apps.hpo.api.views import StudyViewSet

router = SimpleRouter()
router.register("studies", StudyViewSet, basename="study")
