"""The MLflow-compatible REST API: the official `mlflow` client works unchanged with a portal token."""
