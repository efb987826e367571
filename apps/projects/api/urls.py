from rest_framework.routers import SimpleRouter

from apps.projects.api.views import MembershipViewSet, ProjectSecretViewSet, ProjectViewSet

router = SimpleRouter()
router.register("projects", ProjectViewSet, basename="project")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("project-secrets", ProjectSecretViewSet, basename="project-secret")
