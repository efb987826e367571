from django.urls import path

from apps.appstore import views

app_name = "appstore"

urlpatterns = [
    path("apps/", views.app_list, name="app-list"),
    path("apps/<int:pk>/", views.app_detail, name="app-detail"),
    path("p/<slug:project>/apps/install/", views.app_install, name="app-install"),
    path("p/<slug:project>/apps/publish/<int:pk>/", views.pipeline_publish, name="pipeline-publish"),
    path("p/<slug:project>/apps/publish/service/<int:pk>/", views.service_publish, name="service-publish"),
    path("p/<slug:project>/apps/publish/notebook/<int:pk>/", views.notebook_publish, name="notebook-publish"),
    path("p/<slug:project>/apps/installed/<int:pk>/", views.installation_detail, name="installation-detail"),
    path("p/<slug:project>/apps/installed/<int:pk>/run/", views.installation_run, name="installation-run"),
    path("p/<slug:project>/apps/installed/<int:pk>/try/", views.installation_try, name="installation-try"),
    path("p/<slug:project>/apps/installed/<int:pk>/upgrade/", views.installation_upgrade, name="installation-upgrade"),
    path(
        "p/<slug:project>/apps/installed/<int:pk>/uninstall/",
        views.installation_uninstall,
        name="installation-uninstall",
    ),
]
