from django.urls import path

from apps.labeling import views

app_name = "labeling"

urlpatterns = [
    path("p/<slug:project>/labeling/", views.labeling_list, name="labeling-list"),
    path("p/<slug:project>/labeling/new/", views.labeling_create, name="labeling-create"),
    path("p/<slug:project>/labeling/<int:pk>/", views.labeling_detail, name="labeling-detail"),
    path("p/<slug:project>/labeling/<int:pk>/annotate/", views.labeling_annotate, name="labeling-annotate"),
    path("p/<slug:project>/labeling/<int:pk>/training/", views.labeling_training, name="labeling-training"),
    path("p/<slug:project>/labeling/<int:pk>/train/", views.labeling_train, name="labeling-train"),
    path("p/<slug:project>/labeling/<int:pk>/export/", views.labeling_export, name="labeling-export"),
    path("p/<slug:project>/labeling/<int:pk>/ml-backend/", views.labeling_attach, name="labeling-attach"),
    path("p/<slug:project>/labeling/<int:pk>/preannotate/", views.labeling_preannotate, name="labeling-preannotate"),
]
