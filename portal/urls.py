from django.contrib import admin
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.accounts.api.views import ProfileView
from apps.accounts.views import set_language
from apps.console.api.views import SearchView
from apps.jobs.sparkui import spark_ui_proxy
from apps.labeling import media as labeling_media
from apps.labeling import mlbackend as labeling_ml
from apps.labeling import webhooks as labeling_webhooks
from apps.notebooks.proxy import notebook_proxy
from portal.api import router
from portal.health import healthz, readyz
from portal.metrics import metrics

api_patterns = [
    path("me/", ProfileView.as_view(), name="me"),
    path("search/", SearchView.as_view(), name="search"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its init script from a URL, not inline: the Content-Security-Policy allows no inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("", include(router.urls)),  # after the four above: the router's list is long (every viewset, with suffixes)
]

urlpatterns = [
    # The API routes first: a tracking client's call or an API request is matched after a handful of patterns, not
    # after the ~150 of every project page tried in turn (~50 µs of a `log_metric`, docs/tracking.md). Their prefixes
    # (api/, ajax-api/) are no page's.
    path("", include("apps.models.mlflow_api.urls")),
    path("api/v1/", include((api_patterns, "api"))),
    path("", include("apps.console.urls")),  # the `projects` namespace: apps/console/urls.py
    path("", include("apps.jobs.urls")),
    path("", include("apps.datasets.urls")),
    path("", include("apps.models.urls")),
    path("", include("apps.runtime.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.notebooks.urls")),
    path("", include("apps.hpo.urls")),
    path("", include("apps.knowledge.urls")),
    path("", include("apps.serving.urls")),
    path("", include("apps.appstore.urls")),
    path("", include("apps.labeling.urls")),
    path("", include("apps.alerts.urls")),
    path("", include("apps.monitoring.urls")),
    path("", include("apps.retraining.urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("admin/", admin.site.urls),
    # The notebook proxy: every method and path under a notebook server's base URL (apps/notebooks/proxy.py).
    path("notebook/<int:pk>/", notebook_proxy, name="notebook-proxy"),
    path("notebook/<int:pk>/<path:path>", notebook_proxy, name="notebook-proxy"),
    # A locally running Spark task's UI, read-only, for whoever may view its project (apps/jobs/sparkui.py).
    path("task/<int:pk>/spark/", spark_ui_proxy, name="spark-ui"),
    path("task/<int:pk>/spark/<path:path>", spark_ui_proxy, name="spark-ui"),
    # Signed, expiring links to one labeling task's file, for Label Studio (apps/labeling/media.py).
    path("labeling/media/<str:token>", labeling_media.serve, name="labeling-media"),
    path("labeling/webhook/<int:pk>", labeling_webhooks.receive, name="labeling-webhook"),
    # The Label Studio ML-backend protocol in front of an attached inference service (apps/labeling/mlbackend.py).
    path("labeling/ml/<int:pk>/health", labeling_ml.health, name="labeling-ml-health"),
    path("labeling/ml/<int:pk>/setup", labeling_ml.setup, name="labeling-ml-setup"),
    path("labeling/ml/<int:pk>/versions", labeling_ml.versions, name="labeling-ml-versions"),
    path("labeling/ml/<int:pk>/predict", labeling_ml.predict, name="labeling-ml-predict"),
    path("labeling/ml/<int:pk>/webhook", labeling_ml.webhook, name="labeling-ml-webhook"),
    path("labeling/ml/<int:pk>/train", labeling_ml.train, name="labeling-ml-train"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="prometheus-django-metrics"),  # not public: portal/metrics.py
    # The language switcher (Django's set_language, which also saves a signed-in user's preference).
    path("i18n/setlang/", set_language, name="set_language"),
    # The `djangojs` catalogue of static/js (gettext() in the browser), in the request's language.
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
]
