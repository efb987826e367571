"""Per-prediction explanations through the portal's service API (`POST /api/v1/services/<id>/explain/`), what the test
console's "Explain" calls: the request goes to a ready replica's `/v2/models/<m>/explain` (SHAP values computed by the
model server, apps/serving/modelserver/explain.py), with a background the replica cannot know: rows of the dataset
version the served model was trained on (lineage, as the console's "use a row from the dataset"), unless the request
brings its own `parameters.background`. Callers outside the portal reach the same endpoint through the router
(`/serving/<p>/<s>/v2/models/<m>/explain`) and send their background themselves."""

from __future__ import annotations

import math
from typing import Any

import requests
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.serving import console
from apps.serving.models import InferenceService, Replica

BACKGROUND_ROWS = 50
TIMEOUT = 30.0


class Unavailable(Exception):
    """No replica can answer now (503); the message says why."""


def _replica(service: InferenceService) -> tuple[str, str]:
    current = service.current_revision
    replica = current.replicas.filter(status=Replica.Status.READY).first() if current else None
    if replica is None or not replica.upstream:
        raise Unavailable(_("No replica is ready: explanations work once the service serves."))
    return replica.upstream, current.config.get("model_name") or service.name


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def training_background(service: InferenceService, names: list[str]) -> tuple[list[list[float]], str]:
    """Up to BACKGROUND_ROWS numeric rows (one value per feature) of the table the served model trained on, evenly
    spread over its first rows, and the dataset version's ref. Raises ValidationError when there is none."""
    found, _file, _header, positions, first = console.training_rows(service, names)
    step = max(1, len(first) // BACKGROUND_ROWS)
    rows = []
    for row in first[::step][:BACKGROUND_ROWS]:
        values = [_number(row[i]) if i < len(row) else None for i in positions]
        if None not in values:
            rows.append(values)
    if not rows:
        raise ValidationError({"dataset": [_("%(ref)s has no numeric row to compare with.") % {"ref": found.ref}]})
    return rows, found.ref


# An Open Inference Protocol v2 request's keys (as infer takes them).
REQUEST_KEYS = ("id", "inputs", "outputs", "parameters")


def explain(service: InferenceService, body: Any) -> tuple[int, dict[str, Any]]:
    """The replica's answer (status, JSON document) to `body`, an OIP v2 request, with a training background added
    when it has none. Raises Unavailable."""
    if isinstance(body, dict) and (unknown := sorted(str(key) for key in body if key not in REQUEST_KEYS)):
        # The API's write contract (StrictFieldsMixin): a misspelt key is named, not ignored.
        message = _("Unknown field. Fields this endpoint takes: %(known)s.") % {"known": ", ".join(REQUEST_KEYS)}
        return 400, {key: [message] for key in unknown}
    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
        return 400, {"error": _("The body must be a JSON object with an 'inputs' list (Open Inference Protocol v2).")}
    parameters = body.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        return 400, {"error": _("'parameters' must be an object.")}
    upstream, name = _replica(service)
    dataset = None
    if not (parameters or {}).get("background"):
        try:
            metadata = requests.get(f"{upstream}/v2/models/{name}", timeout=TIMEOUT).json()
            rows, dataset = training_background(service, console.features(metadata))
            body = {**body, "parameters": {**(parameters or {}), "background": rows}}
        except (requests.RequestException, ValueError, ValidationError):
            pass  # the replica then explains the rows against each other, or says a single row needs a background
    try:
        response = requests.post(f"{upstream}/v2/models/{name}/explain", json=body, timeout=TIMEOUT)
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise Unavailable(_("The replica did not answer: %(e)s") % {"e": exc}) from None
    if not isinstance(document, dict):
        raise Unavailable(_("The replica's answer is not a JSON object."))
    if response.status_code == 200 and dataset and isinstance(document.get("background"), dict):
        document["background"]["dataset"] = dataset
    return response.status_code, document
