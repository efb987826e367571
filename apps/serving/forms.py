"""Forms of the serving pages. Values are checked by the service layer (one set of messages for pages and API)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.models.models import RegisteredModel
from apps.runtime.workload import format_memory
from apps.serving.models import Framework, InferenceService
from portal.lib.forms import StyledFormMixin


class ServiceForm(StyledFormMixin, forms.Form):
    """Settings of a service; `name` only when it is created (it is part of the service's URL)."""

    name = forms.CharField(
        label=_("Name"),
        max_length=50,
        help_text=_("Lowercase letters, digits and hyphens; the service answers at /serving/<project>/<name>/."),
    )
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2}))
    stage = forms.ChoiceField(label=_("Stage"), choices=InferenceService.Stage.choices)
    registered_model = forms.ChoiceField(label=_("Registered model"), required=False)
    model_version = forms.CharField(
        label=_("Version"),
        required=False,
        max_length=10,
        help_text=_("A version number to pin, or leave empty and follow an alias."),
    )
    follow_alias = forms.CharField(
        label=_("Alias to follow"),
        required=False,
        max_length=255,
        help_text=_("e.g. production: moving the alias rolls the service."),
    )
    framework = forms.ChoiceField(label=_("Framework"), choices=Framework.choices)
    image = forms.CharField(
        label=_("Image"),
        required=False,
        max_length=200,
        help_text=_("On Kubernetes; empty: the portal's model-server image."),
    )
    command = forms.CharField(
        label=_("Command (custom only)"),
        required=False,
        max_length=2000,
        help_text=_(
            "A shell-like line; {port} is the port to listen on, {model} the model's "
            "path. It must answer the Open Inference Protocol v2."
        ),
    )
    env = forms.CharField(
        label=_("Environment"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("NAME=value lines; ${secret:NAME} takes a project secret."),
    )
    cpu = forms.CharField(label=_("CPU cores per replica"), initial="1", max_length=20)
    memory = forms.CharField(label=_("Memory per replica"), initial="1Gi", max_length=20)
    gpu = forms.CharField(label=_("GPUs per replica"), initial="0", max_length=20)
    min_replicas = forms.CharField(label=_("Min replicas"), initial="1", max_length=5)
    max_replicas = forms.CharField(label=_("Max replicas"), initial="1", max_length=5)
    scale_metric = forms.ChoiceField(label=_("Autoscale on"), choices=InferenceService.ScaleMetric.choices)
    scale_target = forms.CharField(
        label=_("Target per replica"),
        initial="8",
        max_length=6,
        help_text=_("Concurrent requests, or CPU use in percent of the request."),
    )
    auth = forms.ChoiceField(label=_("Authentication"), choices=InferenceService.Auth.choices)
    payload_log_percent = forms.CharField(
        label=_("Payload logging (percent of requests)"),
        required=False,
        initial="0",
        max_length=3,
        help_text=_("Share of inference requests kept with their answers, for ground truth and drift; 0 keeps none."),
    )
    payload_log_max_kb = forms.CharField(
        label=_("Largest logged body (KiB)"), initial="64", max_length=5, required=False,
        help_text=_("A larger request or answer keeps only its size."),
    )  # fmt: skip
    payload_log_keep = forms.CharField(
        label=_("Logged requests kept per revision"), initial="10000", max_length=8, required=False,
        help_text=_("The oldest go first."),
    )  # fmt: skip

    def __init__(self, project: Any, *args: Any, service: InferenceService | None = None, **kwargs: Any) -> None:
        if service is not None:
            kwargs.setdefault("initial", initial_of(service))
        super().__init__(*args, **kwargs)
        models = RegisteredModel.objects.filter(project=project).order_by("name").values_list("pk", "name")
        self.fields["registered_model"].choices = [("", "—"), *((str(pk), name) for pk, name in models)]
        if service is not None:
            del self.fields["name"]

    def settings(self) -> dict[str, Any]:
        """The cleaned values as the service layer takes them."""
        data = dict(self.cleaned_data)
        data.pop("name", None)
        data["registered_model"] = data.get("registered_model") or None
        data["model_version"] = data.get("model_version") or None
        for key in ("payload_log_percent", "payload_log_max_kb", "payload_log_keep"):
            if data.get(key) in ("", None):  # left empty: the service's current value (a new one's default)
                data.pop(key, None)
        return data


def initial_of(service: InferenceService) -> dict[str, Any]:
    return {
        "description": service.description, "stage": service.stage,
        "registered_model": str(service.registered_model_id or ""),
        "model_version": str(service.model_version.version) if service.model_version_id else "",
        "follow_alias": service.follow_alias, "framework": service.framework, "image": service.image,
        "command": " ".join(service.command), "env": "\n".join(f"{k}={v}" for k, v in service.env.items()),
        "cpu": f"{service.cpu:g}", "memory": format_memory(service.memory_bytes), "gpu": f"{service.gpu:g}",
        "min_replicas": service.min_replicas, "max_replicas": service.max_replicas,
        "scale_metric": service.scale_metric, "scale_target": service.scale_target, "auth": service.auth,
        "payload_log_percent": service.payload_log_percent, "payload_log_max_kb": service.payload_log_max_kb,
        "payload_log_keep": service.payload_log_keep,
    }  # fmt: skip


def example_request(inputs: list[dict[str, Any]]) -> str:
    """An OIP v2 request with one row of zeros per input, from the model's metadata (the console's starting point)."""
    tensors = []
    for spec in inputs:
        shape = [1 if (not isinstance(d, int) or d < 0) else d for d in (spec.get("shape") or [1])]
        size = 1
        for d in shape:
            size *= d
        zero = "" if spec.get("datatype") == "BYTES" else 0
        tensors.append({"name": spec.get("name", "input-0"), "shape": shape,
                        "datatype": spec.get("datatype", "FP64"), "data": [zero] * min(size, 1000)})  # fmt: skip
    return json.dumps({"inputs": tensors}, indent=2)
