"""The Try-it form of a model that takes one grey image per row ([-1, H, W] or [-1, 1, H, W]): an upload made grey,
scaled and mapped onto the pixel range its MLmodel metadata declares, or the pixel values; clear errors otherwise."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image

from apps.appstore.tryit import Endpoint, demo_form_class

DIGITS = {"image": {"pixel_range": [0, 16], "ink": "high"}, "classes": list(range(10))}


def endpoint(shape, metadata=None, datatype="FP32") -> Endpoint:
    meta = {"inputs": [{"name": "images", "datatype": datatype, "shape": shape}], "parameters": {}}
    if metadata is not None:
        meta["parameters"]["metadata"] = metadata
    return Endpoint("http://127.0.0.1:1", "digits", meta)


def png(pixels: list[int], size: tuple[int, int]) -> SimpleUploadedFile:
    image = Image.new("L", size)
    image.putdata(pixels)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return SimpleUploadedFile("x.png", out.getvalue(), content_type="image/png")


@pytest.mark.parametrize(
    ("shape", "datatype", "image"),
    [([-1, 8, 8], "FP32", (8, 8)), ([-1, 1, 28, 28], "FP32", (28, 28)), ([-1, 3, 8, 8], "FP32", None),
     ([-1, 64], "FP32", None), ([-1, 8, 8], "BYTES", None), ([-1, -1, 8], "FP32", None)],
)  # fmt: skip
def test_which_inputs_are_grey_images(shape, datatype, image):
    assert endpoint(shape, datatype=datatype).image == image


def test_an_upload_becomes_the_data_s_grey_levels():
    point = endpoint([-1, 8, 8], DIGITS)
    # a 16×16 picture: white background, black ink in its left half
    picture = png([0 if x < 8 else 255 for _y in range(16) for x in range(16)], (16, 16))
    form = demo_form_class(point)({}, {"image": picture})
    assert form.is_valid(), form.errors
    row = form.row()
    assert len(row) == 64
    assert row[:8] == [16.0, 16.0, 16.0, 16.0, 0.0, 0.0, 0.0, 0.0]  # ink is high, scaled onto 0–16
    assert point.classes == list(range(10))


def test_without_metadata_an_upload_stays_0_to_255():
    form = demo_form_class(endpoint([-1, 2, 2]))({}, {"image": png([0, 255, 255, 0], (2, 2))})
    assert form.is_valid(), form.errors
    assert form.row() == [0.0, 255.0, 255.0, 0.0]


def test_pixel_values_and_the_errors():
    form_class = demo_form_class(endpoint([-1, 8, 8], DIGITS))
    values = ", ".join(str(v % 17) for v in range(64))
    form = form_class({"pixels": values})
    assert form.is_valid(), form.errors
    assert form.row()[:3] == [0.0, 1.0, 2.0]
    assert "Give 64 values (8 rows of 8); got 3." in form_class({"pixels": "1 2 3"}).errors["pixels"][0]
    assert "between 0 and 16" in form_class({"pixels": " ".join(["17"] * 64)}).errors["pixels"][0]
    assert "separated by commas" in form_class({"pixels": "a b"}).errors["pixels"][0]
    assert "Upload an image or give its pixel values." in form_class({}).errors["__all__"][0]
    both = form_class({"pixels": values}, {"image": png([0] * 64, (8, 8))})
    assert "not both" in both.errors["__all__"][0]
    junk = form_class({}, {"image": SimpleUploadedFile("x.png", b"not an image", content_type="image/png")})
    assert "not an image" in junk.errors["image"][0]
