"""Auto-labeling with the project's own served models: an inference service attached to a labeling project as
Label Studio's ML backend, predictions mapped to Label Studio results, and "pre-annotate all" in bulk.

The model is asked over the Open Inference Protocol v2 at a ready replica of the service's current revision (as
the service page's console and the app store's "try it" do). Image classification: the task's image (read from the
blob store, not over HTTP) in grayscale, resized to the model's square input (64 features → 8×8), pixel values
scaled to 0..`PIXEL_SCALE` (16, the range of scikit-learn's digits). Text classification: the task's text as one
BYTES element per row. The class is `predict_proba`'s most likely one (its probability is the score), named by the
model's `classes`; a class that is no label of the configuration (by its name, or else by its index) predicts
nothing for that task.
"""

from __future__ import annotations

import io
import logging
import math
import secrets
from typing import Any

import httpx
import numpy as np
from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.datasets import blobs
from apps.datasets.models import VersionFile
from apps.labeling import server
from apps.labeling.client import LabelStudioError, error_messages
from apps.labeling.models import LabelingProject, LabelingTask, MLBackend
from apps.serving.models import InferenceService, Replica

logger = logging.getLogger(__name__)

PIXEL_SCALE = 16.0
TIMEOUT = 60
BATCH = 100
SUPPORTED_KINDS = {LabelingProject.Kind.IMAGE_CLASSIFICATION, LabelingProject.Kind.TEXT_CLASSIFICATION}


class NotServing(RuntimeError):
    """The service has no ready replica, or its model server did not answer as expected."""


# --- attaching -----------------------------------------------------------------------------------------------
def backend_url(row: MLBackend) -> str:
    return f"{settings.LABELING_PORTAL_URL.rstrip('/')}/labeling/ml/{row.labeling_project_id}"


def attach(labeling: LabelingProject, service: InferenceService, user: Any) -> MLBackend:
    """Register `service` as the labeling project's ML backend in Label Studio (`POST /api/ml`, SDK `ml.create`,
    basic auth); Label Studio then calls /health and /setup — at once, so the row (and its credentials) is
    committed before the call, and removed again when Label Studio refuses. Replaces an earlier attachment."""
    if service.project_id != labeling.project_id:
        raise ValidationError({"service": [_("Choose an inference service of this project.")]})
    if labeling.kind not in SUPPORTED_KINDS:
        raise ValidationError({"service": [_("Auto-labeling is offered for image and text classification projects.")]})
    if labeling.ls_project_id is None:
        raise ValidationError({"service": [_("This labeling project has no Label Studio project yet.")]})
    password = secrets.token_urlsafe(32)
    with server.connect() as client:
        old = MLBackend.objects.filter(labeling_project=labeling).first()
        if old is not None:
            detach(old, client=client)
        row = MLBackend.objects.create(
            labeling_project=labeling,
            service=service,
            username=f"portal-labeling-{labeling.pk}",
            password_hash=make_password(password),
            created_by=user if getattr(user, "pk", None) else None,
        )
        try:
            created = _register(client, labeling, service, row, password)
        except BaseException:
            row.delete()
            raise
        row.ls_ml_backend_id = created["id"]
        row.save(update_fields=["ls_ml_backend_id"])
    return row


def _register(
    client: Any, labeling: LabelingProject, service: InferenceService, row: MLBackend, password: str
) -> dict[str, Any]:
    try:
        return client.request(
            "POST",
            "/api/ml/",
            json={
                "project": labeling.ls_project_id,
                "url": backend_url(row),
                "title": f"{service.name}"[:100],
                "is_interactive": False,
                "auth_method": "BASIC_AUTH",
                "basic_auth_user": row.username,
                "basic_auth_pass": password,
            },
        )
    except LabelStudioError as exc:
        if exc.status != 400:
            raise
        raise ValidationError({"service": error_messages(exc.detail)}) from exc


def detach(row: MLBackend, client: Any = None) -> None:
    """Remove the ML backend from Label Studio (gone already: fine), then the row."""
    own = client is None
    client = client or server.connect()
    try:
        if row.ls_ml_backend_id is not None:
            try:
                client.request("DELETE", f"/api/ml/{row.ls_ml_backend_id}")
            except LabelStudioError as exc:
                if exc.status != 404:
                    raise
        row.delete()
    finally:
        if own:
            client.close()


def credentials_match(row: MLBackend, username: str, password: str) -> bool:
    return secrets.compare_digest(row.username.encode(), username.encode()) and check_password(
        password, row.password_hash
    )


# --- the model -----------------------------------------------------------------------------------------------
def _endpoint(service: InferenceService) -> tuple[str, str, dict[str, Any], str]:
    revision = service.current_revision
    replica = revision.replicas.filter(status=Replica.Status.READY).first() if revision else None
    if replica is None or not replica.upstream:
        raise NotServing(_("The service %(name)s has no ready replica.") % {"name": service.name})
    name = revision.config.get("model_name") or service.name
    try:
        response = httpx.get(f"{replica.upstream}/v2/models/{name}", timeout=TIMEOUT)
        response.raise_for_status()
        metadata = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise NotServing(_("The model server did not answer: %(e)s") % {"e": exc}) from None
    return replica.upstream, name, metadata, model_version(service)


def model_version(service: InferenceService) -> str:
    revision = service.current_revision
    return f"{service.name}@r{revision.number}" if revision else service.name


def _image_features(labeling: LabelingProject, task: LabelingTask, width: int) -> list[float]:
    from PIL import Image

    entry = VersionFile.objects.filter(version_id=labeling.dataset_version_id, path=task.path).first()
    if entry is None:
        raise NotServing(_("%(path)s is no longer in the dataset version.") % {"path": task.path})
    side = math.isqrt(width)
    if side * side != width:
        raise NotServing(_("The model takes %(n)d features, not a square image.") % {"n": width})
    raw = b"".join(blobs.open_chunks(entry.blob_id))
    image = Image.open(io.BytesIO(raw)).convert("L").resize((side, side))
    pixels = np.asarray(image, dtype=np.float64).reshape(-1) / 255.0 * PIXEL_SCALE
    return pixels.tolist()


def _infer(upstream: str, name: str, tensor: dict[str, Any], outputs: list[str]) -> dict[str, list]:
    body = {"inputs": [tensor], "outputs": [{"name": o} for o in outputs]}
    try:
        response = httpx.post(f"{upstream}/v2/models/{name}/infer", json=body, timeout=TIMEOUT)
        answer = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise NotServing(_("The model server did not answer: %(e)s") % {"e": exc}) from None
    if response.status_code != 200:
        raise NotServing(str(answer.get("error") if isinstance(answer, dict) else answer))
    return {o["name"]: o["data"] for o in answer.get("outputs", [])}


def _label_for(klass: Any, labels: list[str]) -> str | None:
    if str(klass) in labels:
        return str(klass)
    try:
        index = int(klass)
    except (TypeError, ValueError):
        return None
    return labels[index] if 0 <= index < len(labels) and float(klass) == index else None


def predict(labeling: LabelingProject, service: InferenceService, tasks: list[LabelingTask]) -> list[dict[str, Any]]:
    """One Label Studio prediction per task: `{"result": [choices], "score", "model_version"}` (an empty result
    when the model's class is no label). The scores are kept on the tasks for "uncertain first"."""
    if not tasks:
        return []
    upstream, name, metadata, version = _endpoint(service)
    tensor_spec = (metadata.get("inputs") or [{}])[0]
    output_names = {o.get("name") for o in metadata.get("outputs") or []}
    classes = (metadata.get("parameters") or {}).get("classes")
    if "predict_proba" not in output_names or not classes:
        raise NotServing(_("The model gives no class probabilities (predict_proba), so it cannot pre-annotate."))
    if labeling.kind == LabelingProject.Kind.IMAGE_CLASSIFICATION:
        shape = tensor_spec.get("shape") or []
        width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 0 else 0
        if not width:
            raise NotServing(_("The model does not say how many features it takes."))
        rows = [_image_features(labeling, task, width) for task in tasks]
        tensor = {"name": tensor_spec.get("name") or "input-0", "shape": [len(rows), width],
                  "datatype": tensor_spec.get("datatype") or "FP64", "data": [v for r in rows for v in r]}  # fmt: skip
        to_name = "image"
    else:
        texts = [_task_text(labeling, task) for task in tasks]
        tensor = {"name": tensor_spec.get("name") or "input-0", "shape": [len(texts)], "datatype": "BYTES",
                  "data": texts}  # fmt: skip
        to_name = "text"
    probabilities = np.asarray(_infer(upstream, name, tensor, ["predict_proba"])["predict_proba"], dtype=float)
    probabilities = probabilities.reshape(len(tasks), -1)
    predictions = []
    for task, row in zip(tasks, probabilities, strict=True):
        best = int(row.argmax())
        score = float(row[best])
        label = _label_for(classes[best], labeling.labels)
        result = (
            [{"from_name": "label", "to_name": to_name, "type": "choices", "value": {"choices": [label]}}]
            if label is not None
            else []
        )
        predictions.append({"result": result, "score": score, "model_version": version})
        task.score, task.model_version = score, version
    LabelingTask.objects.bulk_update(tasks, ["score", "model_version"])
    return predictions


def _task_text(labeling: LabelingProject, task: LabelingTask) -> str:
    from apps.labeling import services

    entry = VersionFile.objects.get(version_id=labeling.dataset_version_id, path=task.path)
    import posixpath

    extension = posixpath.splitext(entry.path)[1].lower()
    for number, text in services._text_rows(entry, extension, labeling.text_column):
        if number == task.row:
            return text
    raise NotServing(_("%(path)s line %(n)s is gone.") % {"path": task.path, "n": task.row})


# --- bulk ----------------------------------------------------------------------------------------------------
def preannotate_all(row: MLBackend) -> int:
    """Predict every task of the labeling project and import the predictions in bulk
    (`POST /api/projects/<id>/import/predictions`, SDK `projects.import_predictions`); the count imported."""
    labeling = row.labeling_project
    tasks = list(labeling.tasks.exclude(ls_task_id=None).order_by("pk"))
    imported = 0
    with server.connect() as client:
        for start in range(0, len(tasks), BATCH):
            chunk = tasks[start : start + BATCH]
            predictions = predict(labeling, row.service, chunk)
            body = [
                {"task": task.ls_task_id, **prediction}
                for task, prediction in zip(chunk, predictions, strict=True)
                if prediction["result"]
            ]
            if body:
                client.request("POST", f"/api/projects/{labeling.ls_project_id}/import/predictions", json=body)
            imported += len(body)
    return imported


def uncertain_first(labeling: LabelingProject) -> list[LabelingTask]:
    """The tasks the model predicted, least sure first (lowest score), then those without a prediction."""
    from django.db.models import F

    return list(labeling.tasks.order_by(F("score").asc(nulls_last=True), "pk"))
