from django.urls import path

from apps.models.views import experiments, mlflow_links, registry, runs

app_name = "models"

P = "p/<slug:project>/"

urlpatterns: list = [
    path("mlflow-ui/", mlflow_links.mlflow_link, name="mlflow-link"),
    path(P + "experiments/", experiments.experiment_list, name="experiment-list"),
    path(P + "experiments/<int:pk>/", experiments.experiment_detail, name="experiment-detail"),
    path(P + "experiments/<int:pk>/runs.csv", experiments.experiment_export, name="experiment-export"),
    path(P + "tracking-runs/compare/", experiments.run_compare, name="run-compare"),
    path(P + "tracking-runs/<int:pk>/", runs.run_detail, name="run-detail"),
    path(P + "tracking-runs/<int:pk>/register/", runs.run_register, name="run-register"),
    path(P + "tracking-runs/<int:pk>/artifacts/", runs.run_artifacts, name="run-artifacts"),
    path(P + "tracking-runs/<int:pk>/artifacts/download/", runs.run_artifact_download, name="run-artifact-download"),
    path(P + "models/", registry.model_list, name="model-list"),
    path(P + "models/<int:pk>/", registry.model_detail, name="model-detail"),
    path(P + "models/<int:pk>/aliases/", registry.model_alias, name="model-alias"),
    path(P + "model-versions/<int:pk>/", registry.version_detail, name="version-detail"),
    path(P + "model-versions/<int:pk>/card/", registry.version_card, name="version-card"),
    path(P + "model-versions/<int:pk>/card/preview/", registry.version_card_preview, name="version-card-preview"),
]
