""" "Try it": a demo form generated from a served model's signature, and the prediction it answers.

The inputs come from the model server's metadata (`GET /v2/models/<name>` of a ready replica of the current
revision): one number field per named feature when the model declares its columns (the sklearn-train template
writes an MLflow signature), otherwise one per position of its input's second dimension; a text box when the model
takes one string per row (a BYTES input of shape [-1], as the text classification app's model); an image upload or
its pixel values when the input is one grey image per row (a numeric input of shape [-1, H, W] or [-1, 1, H, W], as
the digits app's CNN). An uploaded picture is made grey, scaled to H×W and mapped onto the pixel range the model's
MLflow metadata declares (`{"image": {"pixel_range": [0, 16], "ink": "high"}}`; 0–255 as is without it); "ink":
"high" turns dark ink on a light background into high values, as the digits data has it. The prediction is asked of
that replica over the Open Inference Protocol v2, as the service page's console reads its metadata."""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Any

import requests
from django import forms
from django.utils.translation import gettext as _

from apps.serving import console
from apps.serving.models import InferenceService, Replica
from portal.lib.forms import StyledFormMixin

TIMEOUT = 10
MAX_IMAGE_BYTES = 5 * 2**20
MAX_IMAGE_PIXELS = 40_000_000


class NotServing(Exception):
    """The service has no ready replica, or its model server did not answer."""


@dataclass
class Endpoint:
    upstream: str
    model_name: str
    metadata: dict[str, Any]

    @property
    def features(self) -> list[str]:
        return console.features(self.metadata)

    @property
    def input(self) -> dict[str, Any]:
        return (self.metadata.get("inputs") or [{}])[0]

    @property
    def text(self) -> str | None:
        """The input's name when the model takes one string per row (a text model): the form is a text box."""
        if self.input.get("datatype") == "BYTES" and list(self.input.get("shape") or []) == [-1]:
            return str(self.input.get("name") or "input-0")
        return None

    @property
    def image(self) -> tuple[int, int] | None:
        """(height, width) when the model takes one grey image per row: a numeric [-1, H, W] or [-1, 1, H, W]."""
        shape = list(self.input.get("shape") or [])
        if self.input.get("datatype") in (None, "BYTES", "BOOL") or len(shape) not in (3, 4):
            return None
        if len(shape) == 4 and shape[1] != 1:
            return None
        height, width = shape[-2:]
        if all(isinstance(d, int) and 0 < d <= 1024 for d in (height, width)):
            return height, width
        return None

    @property
    def image_spec(self) -> dict[str, Any]:
        meta = (self.metadata.get("parameters") or {}).get("metadata")
        spec = meta.get("image") if isinstance(meta, dict) else None
        return spec if isinstance(spec, dict) else {}

    @property
    def pixel_range(self) -> tuple[float, float]:
        low, high = (self.image_spec.get("pixel_range") or [0, 255])[:2]
        try:
            low, high = float(low), float(high)
        except (TypeError, ValueError):
            return 0.0, 255.0
        return (low, high) if high > low else (0.0, 255.0)

    @property
    def classes(self) -> list[Any]:
        parameters = self.metadata.get("parameters") or {}
        meta = parameters.get("metadata")
        classes = parameters.get("classes") or (meta.get("classes") if isinstance(meta, dict) else None)
        return list(classes) if isinstance(classes, list) else []


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


class ImageForm(StyledFormMixin, forms.Form):
    """One grey image: a picture to upload, or its pixel values row by row."""

    image = forms.FileField(
        label=_("Image"), required=False, widget=forms.ClearableFileInput(attrs={"accept": "image/*"})
    )
    pixels = forms.CharField(
        label=_("…or its pixel values"), required=False, max_length=100_000, widget=forms.Textarea(attrs={"rows": 3})
    )
    point: Endpoint

    def clean_image(self) -> list[float] | None:
        upload = self.cleaned_data.get("image")
        if not upload:
            return None
        if upload.size > MAX_IMAGE_BYTES:
            raise forms.ValidationError(_("The image is larger than 5 MB."))
        return image_pixels(upload.read(), self.point)

    def clean_pixels(self) -> list[float] | None:
        text = (self.cleaned_data.get("pixels") or "").strip()
        if not text:
            return None
        height, width = self.point.image or (0, 0)
        try:
            values = [float(v) for v in re.split(r"[\s,;]+", text) if v]
        except ValueError:
            raise forms.ValidationError(_("Give numbers separated by commas or spaces.")) from None
        if len(values) != height * width:
            raise forms.ValidationError(
                _("Give %(n)s values (%(h)s rows of %(w)s); got %(got)s.")
                % {"n": height * width, "h": height, "w": width, "got": len(values)}
            )
        low, high = self.point.pixel_range
        if not all(math.isfinite(v) and low <= v <= high for v in values):
            raise forms.ValidationError(
                _("Each value must lie between %(low)g and %(high)g.") % {"low": low, "high": high}
            )
        return values

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors and data.get("image") is None and data.get("pixels") is None:
            raise forms.ValidationError(_("Upload an image or give its pixel values."))
        if data.get("image") is not None and data.get("pixels") is not None:
            raise forms.ValidationError(_("Give an image or pixel values, not both."))
        return data

    def row(self) -> list[float]:
        return self.cleaned_data.get("image") or self.cleaned_data["pixels"]


def image_pixels(content: bytes, point: Endpoint) -> list[float]:
    """An uploaded picture as the model's grey levels: grey, scaled to its H×W, mapped onto its pixel range."""
    from PIL import Image, UnidentifiedImageError

    height, width = point.image or (0, 0)
    try:
        with Image.open(io.BytesIO(content)) as picture:  # reads the header only
            if picture.width * picture.height > MAX_IMAGE_PIXELS:  # a decompression bomb is refused undecoded
                raise forms.ValidationError(_("The image has too many pixels."))
            picture.load()
            grey = picture.convert("L").resize((width, height), Image.Resampling.BOX)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise forms.ValidationError(
            _("This is not an image the portal can read (PNG, JPEG, GIF, BMP, WebP…).")
        ) from None
    levels = list(grey.get_flattened_data())
    if point.image_spec.get("ink") == "high":  # dark ink on a light background: ink becomes the high values
        levels = [255 - v for v in levels]
    low, high = point.pixel_range
    return [round(low + v * (high - low) / 255, 4) for v in levels]


def demo_form_class(point: Endpoint) -> type[forms.Form]:
    if point.image:
        return type("TryItImageForm", (ImageForm,), {"point": point})
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
    elif point.image:
        shape = [1, *point.input["shape"][1:]]
        body = {"inputs": [{"name": point.input.get("name") or "input-0", "shape": shape,
                            "datatype": point.input["datatype"], "data": values["row"]}]}  # fmt: skip
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
