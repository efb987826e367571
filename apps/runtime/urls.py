from django.urls import path

from apps.runtime import views

app_name = "runtime"

urlpatterns = [
    path("capacity/", views.capacity, name="capacity"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/new/", views.cluster_create, name="cluster-create"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<slug:name>/edit/", views.cluster_edit, name="cluster-edit"),
    path("clusters/<slug:name>/delete/", views.cluster_delete, name="cluster-delete"),
    path("clusters/<slug:name>/bindings/", views.binding_save, name="binding-save"),
    path("clusters/<slug:name>/bindings/<int:pk>/delete/", views.binding_delete, name="binding-delete"),
    path("p/<slug:project>/clusters/", views.project_clusters, name="project-clusters"),
]
