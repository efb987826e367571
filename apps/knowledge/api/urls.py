from rest_framework.routers import SimpleRouter

from apps.knowledge.api.views import DocumentViewSet, KnowledgeBaseViewSet

router = SimpleRouter()
router.register("knowledge-bases", KnowledgeBaseViewSet, basename="knowledgebase")
router.register("knowledge-documents", DocumentViewSet, basename="knowledgedocument")
