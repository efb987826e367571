from django.urls import path

from apps.audit import views

app_name = "audit"

urlpatterns = [
    path("p/<slug:project>/audit/", views.project_log, name="project-log"),
    path("p/<slug:project>/audit/export.csv", views.project_log_csv, name="project-log-csv"),
    path("audit/", views.log, name="log"),
    path("audit/export.csv", views.log_csv, name="log-csv"),
]
