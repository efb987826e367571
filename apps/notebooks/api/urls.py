from rest_framework.routers import SimpleRouter

from apps.notebooks.api.views import NotebookViewSet

router = SimpleRouter()
router.register("notebooks", NotebookViewSet, basename="notebook")
