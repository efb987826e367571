from rest_framework.routers import SimpleRouter

from apps.runtime.api.views import ClusterViewSet, ProjectClusterViewSet

router = SimpleRouter()
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("cluster-bindings", ProjectClusterViewSet, basename="clusterbinding")
