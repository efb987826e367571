from django.urls import path

from apps.monitoring import views

app_name = "monitoring"

urlpatterns = [
    path("p/<slug:project>/monitors/", views.monitor_list, name="monitor-list"),
    path("p/<slug:project>/monitors/new/", views.monitor_create, name="monitor-create"),
    path("p/<slug:project>/monitors/<int:pk>/", views.monitor_detail, name="monitor-detail"),
    path("p/<slug:project>/monitors/<int:pk>/edit/", views.monitor_edit, name="monitor-edit"),
    path("p/<slug:project>/monitors/<int:pk>/run/", views.monitor_run, name="monitor-run"),
    path("p/<slug:project>/monitors/<int:pk>/delete/", views.monitor_delete, name="monitor-delete"),
]
