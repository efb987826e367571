""" "Try it": a demo form generated from a served model's signature, and the prediction it answers.

The inputs come from the model server's metadata (`GET /v2/models/<name>` of a ready replica of the current
revision): one number field per named feature when the model declares its columns (the sklearn-train template
writes an MLflow signature), otherwise one per position of its input's second dimension; a text box when the model
takes one string per row (a BYTES input of shape [-1], as the text classification app's model). The prediction is
asked of that replica over the Open Inference Protocol v2, as the service page's console reads its metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests
from django import forms
from django.utils.translation import gettext as _

from apps.serving.models import InferenceService, Replica
from portal.lib.forms import StyledFormMixin

TIMEOUT = 10


class NotServing(Exception):
    """The service has no ready replica, or its model server did not answer."""


@dataclass
class Endpoint:
    upstream: str
    model_name: str
    metadata: dict[str, Any]

    @property
    def features(self) -> list[str]:
        names = (self.metadata.get("parameters") or {}).get("feature_names")
        if isinstance(names, list) and names:
            return [str(n) for n in names]
        shape = (self.metadata.get("inputs") or [{}])[0].get("shape") or []
        width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 0 else 0
        return [f"x{i}" for i in range(width)]

    @property
    def input(self) -> dict[str, Any]:
        return (self.metadata.get("inputs") or [{}])[0]

    @property
    def text(self) -> str | None:
        """The input's name when the model takes one string per row (a text model): the form is a text box."""
        if self.input.get("datatype") == "BYTES" and list(self.input.get("shape") or []) == [-1]:
            return str(self.input.get("name") or "input-0")
        return None


def endpoint(service: InferenceService) -> Endpoint:
    current = service.current_revision
    replica = current.replicas.filter(status=Replica.Status.READY).first() if current else None
    if replica is None or not replica.upstream:
        raise NotServing(_("No replica is ready yet: run the app's pipeline, then wait for the service to serve."))
    name = current.config.get("model_name") or service.name
    try:
        response = requests.get(f"{replica.upstream}/v2/models/{name}", timeout=TIMEOUT)
        response.raise_for_status()
        return Endpoint(replica.upstream, name, response.json())
    except (requests.RequestException, ValueError) as exc:
        raise NotServing(_("The model server did not answer: %(e)s") % {"e": exc}) from None


def demo_form_class(point: Endpoint) -> type[forms.Form]:
    if point.text:
        widget = forms.Textarea(attrs={"rows": 3})
        fields = {point.text: forms.CharField(label=_("Text"), max_length=10_000, strip=True, widget=widget)}
        return type("TryItForm", (StyledFormMixin, forms.Form), fields)
    fields = {name: forms.FloatField(label=name) for name in point.features}
    return type("TryItForm", (StyledFormMixin, forms.Form), fields)


def predict(point: Endpoint, values: dict[str, float]) -> dict[str, Any]:
    """The model's outputs for one row (the form's values in the features' order, or the text), by output name."""
    if point.text:
        body = {"inputs": [{"name": point.text, "shape": [1], "datatype": "BYTES", "data": [values[point.text]]}]}
    else:
        row = [float(values[name]) for name in point.features]
        body = {"inputs": [{"name": point.input.get("name") or "input-0", "shape": [1, len(row)],
                            "datatype": point.input.get("datatype") or "FP64", "data": row}]}  # fmt: skip
    try:
        response = requests.post(f"{point.upstream}/v2/models/{point.model_name}/infer", json=body, timeout=TIMEOUT)
        answer = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise NotServing(_("The model server did not answer: %(e)s") % {"e": exc}) from None
    if response.status_code != 200:
        raise NotServing(str(answer.get("error") if isinstance(answer, dict) else answer))
    return {output["name"]: output["data"] for output in answer.get("outputs", [])}
