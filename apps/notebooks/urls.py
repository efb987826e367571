from django.urls import path

from apps.notebooks import views

app_name = "notebooks"

urlpatterns = [
    path("p/<slug:project>/notebooks/", views.notebook_list, name="notebook-list"),
    path("p/<slug:project>/notebooks/new/", views.notebook_create, name="notebook-create"),
    path("p/<slug:project>/notebooks/<int:pk>/", views.notebook_detail, name="notebook-detail"),
    path("p/<slug:project>/notebooks/<int:pk>/status/", views.notebook_status, name="notebook-status"),
    path("p/<slug:project>/notebooks/<int:pk>/settings/", views.notebook_settings, name="notebook-settings"),
    path("p/<slug:project>/notebooks/<int:pk>/start/", views.notebook_start, name="notebook-start"),
    path("p/<slug:project>/notebooks/<int:pk>/stop/", views.notebook_stop, name="notebook-stop"),
    path("p/<slug:project>/notebooks/<int:pk>/restart/", views.notebook_restart, name="notebook-restart"),
    path("p/<slug:project>/notebooks/<int:pk>/delete/", views.notebook_delete, name="notebook-delete"),
]
