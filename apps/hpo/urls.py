from django.urls import path

from apps.hpo import views

app_name = "hpo"

urlpatterns = [
    path("p/<slug:project>/studies/", views.study_list, name="study-list"),
    path("p/<slug:project>/studies/new/", views.study_create, name="study-create"),
    path("p/<slug:project>/studies/import/", views.study_import, name="study-import"),
    path("p/<slug:project>/studies/<int:pk>/", views.study_detail, name="study-detail"),
    path("p/<slug:project>/studies/<int:pk>/katib.yaml", views.study_katib, name="study-katib"),
    path("p/<slug:project>/studies/<int:pk>/stop/", views.study_stop, name="study-stop"),
    path("p/<slug:project>/studies/<int:pk>/rerun-best/", views.study_rerun_best, name="study-rerun-best"),
    path("p/<slug:project>/studies/<int:pk>/register-best/", views.study_register_best, name="study-register-best"),
]
