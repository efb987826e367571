from django.urls import path

from apps.serving import views

app_name = "serving"

urlpatterns = [
    path("p/<slug:project>/services/", views.service_list, name="service-list"),
    path("p/<slug:project>/services/new/", views.service_create, name="service-create"),
    path("p/<slug:project>/services/<int:pk>/", views.service_detail, name="service-detail"),
    path("p/<slug:project>/services/<int:pk>/status/", views.service_status, name="service-status"),
    path("p/<slug:project>/services/<int:pk>/edit/", views.service_edit, name="service-edit"),
    path("p/<slug:project>/services/<int:pk>/delete/", views.service_delete, name="service-delete"),
    path("p/<slug:project>/model-versions/<int:pk>/deploy/", views.version_deploy, name="version-deploy"),
    path("p/<slug:project>/services/<int:pk>/rotate-key/", views.service_rotate_key, name="service-rotate-key"),
    *(
        path(f"p/<slug:project>/services/<int:pk>/{name}/", views.action_view(name), name=f"service-{name}")
        for name in views.ACTIONS
    ),
]
