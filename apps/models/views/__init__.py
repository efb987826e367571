"""Pages of experiment tracking and the model registry (the MLflow REST API lives in `mlflow_api/`)."""
