from django.urls import path

from apps.datasets import views

app_name = "datasets"

urlpatterns = [
    path("p/<slug:project>/datasets/", views.dataset_list, name="dataset-list"),
    path("p/<slug:project>/datasets/new/", views.dataset_create, name="dataset-create"),
    path("p/<slug:project>/datasets/<int:pk>/", views.dataset_detail, name="dataset-detail"),
    path("p/<slug:project>/datasets/<int:pk>/upload/", views.dataset_upload, name="dataset-upload"),
    path("p/<slug:project>/datasets/<int:pk>/delete/", views.dataset_delete, name="dataset-delete"),
    path("p/<slug:project>/dataset-versions/<int:pk>/", views.version_detail, name="version-detail"),
    path("p/<slug:project>/dataset-versions/<int:pk>/preview/", views.version_preview, name="version-preview"),
    path("p/<slug:project>/dataset-versions/<int:pk>/diff/", views.version_diff, name="version-diff"),
    path("p/<slug:project>/dataset-versions/<int:pk>/download/", views.version_download, name="version-download"),
    path("p/<slug:project>/dataset-versions/<int:pk>/delete/", views.version_delete, name="version-delete"),
]
