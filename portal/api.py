"""The /api/v1/ router: every app's SimpleRouter registry merged into one DefaultRouter, whose root lists
every list endpoint."""

from rest_framework.routers import DefaultRouter

from apps.accounts.api.urls import router as accounts_router
from apps.alerts.api.urls import router as alerts_router
from apps.appstore.api.urls import router as appstore_router
from apps.audit.api.urls import router as audit_router
from apps.datasets.api.urls import router as datasets_router
from apps.hpo.api.urls import router as hpo_router
from apps.jobs.api.urls import router as jobs_router
from apps.knowledge.api.urls import router as knowledge_router
from apps.labeling.api.urls import router as labeling_router
from apps.models.api.urls import router as models_router
from apps.monitoring.api.urls import router as monitoring_router
from apps.notebooks.api.urls import router as notebooks_router
from apps.projects.api.urls import router as projects_router
from apps.retraining.api.urls import router as retraining_router
from apps.runtime.api.urls import router as runtime_router
from apps.serving.api.urls import router as serving_router

APP_ROUTERS = [
    projects_router,
    jobs_router,
    datasets_router,
    models_router,
    accounts_router,
    runtime_router,
    audit_router,
    notebooks_router,
    serving_router,
    appstore_router,
    labeling_router,
    hpo_router,
    knowledge_router,
    alerts_router,
    monitoring_router,
    retraining_router,
]

router = DefaultRouter()
for app_router in APP_ROUTERS:
    router.registry.extend(app_router.registry)
