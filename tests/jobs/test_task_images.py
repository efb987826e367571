"""Which image a template's tasks run in on a cluster (apps/jobs/dispatcher.py `task_image`): "{portal}" is the portal's
image, or its training image (the Dockerfile's `train` target, PORTAL_TRAIN_IMAGE) for templates that run the "train"
task environment; what PORTAL_TRAIN_IMAGE defaults to."""

from __future__ import annotations

import pytest

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.dispatcher import task_image
from apps.jobs.models import JobTemplate
from portal.settings import _train_image

pytestmark = pytest.mark.django_db

TRAIN_TEMPLATES = {"onnx-optimise", "explain", "spark-features", "pytorch-ddp-train"}


def test_the_builtin_templates_of_the_train_environment_get_the_training_image(settings):
    settings.PORTAL_IMAGE, settings.PORTAL_TRAIN_IMAGE = "reg.example/portal:1.0", "reg.example/portal:1.0-train"
    templates = {t.slug: t for t in load_builtin_templates()}

    images = {slug: task_image(t) for slug, t in templates.items() if t.image == "{portal}"}

    assert {slug for slug, image in images.items() if image == "reg.example/portal:1.0-train"} == TRAIN_TEMPLATES
    assert images["sklearn-train"] == images["automl"] == images["iris-load"] == "reg.example/portal:1.0"
    assert all(image.startswith("reg.example/portal:1.0") for image in images.values())


def test_a_template_with_an_image_of_its_own_keeps_it(settings):
    settings.PORTAL_TRAIN_IMAGE = "portal:train"
    own = JobTemplate(slug="own", image="pytorch/pytorch:2.5", command=["{python:train}", "train.py"])
    assert task_image(own) == "pytorch/pytorch:2.5"
    mixed = JobTemplate(slug="mixed", image="{portal}", command=["{python}", "-c", "{python:train}"])
    assert task_image(mixed) == "portal:train"  # named anywhere in the command, it is that environment's image


@pytest.mark.parametrize(
    ("image", "train"),
    [
        ("mlops-portal:dev", "mlops-portal:dev-train"),
        ("registry.example.com:5000/team/portal:0.1.0", "registry.example.com:5000/team/portal:0.1.0-train"),
        ("registry.example.com:5000/mlops-portal", "registry.example.com:5000/mlops-portal:train"),
        ("mlops-portal", "mlops-portal:train"),
        ("mlops-portal@sha256:" + "a" * 64, "mlops-portal@sha256:" + "a" * 64),
    ],
)
def test_the_training_image_defaults_to_the_portal_images_tag_with_train(image, train):
    assert _train_image(image) == train
