from rest_framework.routers import SimpleRouter

from apps.labeling.api.views import LabelingProjectViewSet

router = SimpleRouter()
router.register("labeling-projects", LabelingProjectViewSet, basename="labelingproject")
