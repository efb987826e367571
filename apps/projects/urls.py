from django.urls import path

from apps.projects import views

# Included through apps/console/urls.py, which adds the home page and the overview to this namespace.
app_name = "projects"

urlpatterns = [
    path("p/new/", views.project_create, name="project-create"),
    path("p/<slug:project>/settings/", views.project_settings, name="settings"),
    path("p/<slug:project>/delete/", views.project_delete, name="delete"),
    path("p/<slug:project>/members/", views.member_list, name="members"),
    path("p/<slug:project>/members/invite/", views.member_invite, name="member-invite"),
    path("p/<slug:project>/members/<int:pk>/role/", views.member_role, name="member-role"),
    path("p/<slug:project>/members/<int:pk>/remove/", views.member_remove, name="member-remove"),
    path("p/<slug:project>/transfer/", views.project_transfer, name="transfer"),
    path("p/<slug:project>/leave/", views.project_leave, name="leave"),
    path("p/<slug:project>/secrets/", views.secret_list, name="secrets"),
    path("p/<slug:project>/secrets/new/", views.secret_create, name="secret-create"),
    path("p/<slug:project>/secrets/<int:pk>/replace/", views.secret_replace, name="secret-replace"),
    path("p/<slug:project>/secrets/<int:pk>/delete/", views.secret_delete, name="secret-delete"),
]
