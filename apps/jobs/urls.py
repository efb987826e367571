from django.urls import path

from apps.jobs.views import logs

app_name = "jobs"

urlpatterns = [
    path("p/<slug:project>/runs/<int:pk>/logs/", logs.log_viewer, name="run-logs"),
    path("p/<slug:project>/runs/<int:pk>/logs/download/", logs.log_download, name="run-logs-download"),
    path("p/<slug:project>/runs/<int:pk>/logs/search/", logs.log_search, name="run-logs-search"),
]
