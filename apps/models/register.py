"""Registering a model from a tracking run's page: which of the run's files look like a model, and the new version of
a registered model (made when the name is new) whose source is one of them. The MLflow API's create-model-version
does the same through apps.models.registry, which this calls; the rules (the source lies in the run's project, the
version number) live there."""

from __future__ import annotations

import posixpath
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.models import artifacts, registry
from apps.models.errors import TrackingError
from apps.models.models import LoggedModel, ModelVersion, RegisteredModel, Run

# Files that make a folder (or are themselves) a model the portal's model server loads (apps/serving/modelserver).
MODEL_FILES = ("MLmodel", "model.joblib", "model.pkl", "model.skops", "model.onnx", "model.pt", "model.pth")
MODEL_SUFFIXES = (".joblib", ".pkl", ".skops", ".onnx", ".pt", ".pth", ".ubj", ".xgb")


def _base(uri: str) -> str:
    return uri.removeprefix("mlflow-artifacts:").lstrip("/")


def model_sources(run: Run) -> list[tuple[str, str]]:
    """(source, label) of what in the run looks like a model: its logged models (MLflow 3), the artifact folders
    with an MLmodel or a model file at their top, and model files at the artifacts' top."""
    found: list[tuple[str, str]] = [
        (f"models:/{m.model_id}", _("logged model %(name)s (%(id)s)") % {"name": m.name, "id": m.model_id})
        for m in LoggedModel.objects.filter(source_run=run).order_by("-creation_timestamp")
    ]
    base = _base(run.artifact_uri)
    for entry in artifacts.list_dir(base):
        if entry["is_dir"]:
            names = {e["path"] for e in artifacts.list_dir(posixpath.join(base, entry["path"]))}
            if names.intersection(MODEL_FILES) or any(n.endswith(MODEL_SUFFIXES) for n in names):
                found.append((entry["path"], _("artifacts/%(path)s/") % {"path": entry["path"]}))
        elif entry["path"].endswith(MODEL_SUFFIXES):
            found.append((entry["path"], _("artifacts/%(path)s") % {"path": entry["path"]}))
    return found


def register_from_run(run: Run, user: Any, *, name: str, source: str, description: str = "") -> ModelVersion:
    """The next version of the registered model `name` (created when new) from `source`: a path in the run's
    artifacts ("model") or one of its logged models ("models:/m-…"). ValidationError keyed by field."""
    name = (name or "").strip()
    source = (source or "").strip().strip("/")
    errors: dict[str, list[str]] = {}
    if not name:
        errors["name"] = [_("Name the registered model.")]
    elif len(name) > 250:
        errors["name"] = [_("At most 250 characters.")]
    if not source:
        errors["source"] = [_("Choose what to register.")]
    elif not source.startswith("models:/"):
        path = posixpath.join(_base(run.artifact_uri), source)
        if ".." in source.split("/") or not (artifacts.is_dir(path) or artifacts.open_file(path)):
            errors["source"] = [_("The run has no artifact “%(path)s”.") % {"path": source}]
    if errors:
        raise ValidationError(errors)
    full = source if source.startswith("models:/") else f"runs:/{run.run_uuid}/{source}"
    try:
        with transaction.atomic():  # a refused source leaves no new, empty registered model behind
            model = RegisteredModel.objects.filter(project_id=run.project_id, name=name).first()
            if model is None:
                model = registry.create_registered_model(run.project, name)
            return registry.create_model_version(
                model, source=full, run=run, description=description, user_id=getattr(user, "username", "")
            )
    except TrackingError as exc:
        raise ValidationError({"source": [str(exc)]}) from None
