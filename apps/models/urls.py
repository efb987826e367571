from django.urls import include, path

app_name = "models"

urlpatterns: list = [
    path("", include("apps.models.mlflow_api.urls")),
]
