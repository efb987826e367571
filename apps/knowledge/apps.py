"""Knowledge bases: a project's documents, chunked and indexed for hybrid (BM25 + dense) retrieval, shared
read-only with other projects by the owner's grant."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KnowledgeConfig(AppConfig):
    name = "apps.knowledge"
    label = "knowledge"
    verbose_name = _("Knowledge bases")
