"""Signed, expiring media links (apps/labeling/media.py): the file of one task, nothing else."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.labeling import media
from apps.labeling.models import LabelingProject, LabelingTask
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(world):
    version = factories.dataset_version(
        factories.dataset(world.project_a, world.alice), {"img/0.png": b"\x89PNG-zero", "img/1.png": b"\x89PNG-one"}
    )
    row = LabelingProject.objects.create(
        project=world.project_a, name="p", dataset_version=version, kind="image_classification", label_config="<View/>"
    )
    return LabelingTask.objects.create(labeling_project=row, path="img/1.png")


def test_a_signed_link_serves_the_file_without_a_session(task, settings):
    settings.LABELING_PORTAL_URL = "http://portal.test"
    url = media.media_url(task.pk)
    assert url.startswith("http://portal.test/labeling/media/")
    response = Client().get(url.removeprefix("http://portal.test"))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"\x89PNG-one"
    assert response["Content-Type"] == "image/png"


def test_a_tampered_or_unknown_link_is_404(task):
    token = media.sign(task.pk)
    assert Client().get(f"/labeling/media/{token[:-2]}xx").status_code == 404
    assert Client().get(f"/labeling/media/{media.sign(task.pk + 1000)}").status_code == 404


def test_an_expired_link_is_404(task, settings):
    token = media.sign(task.pk)
    settings.LABELING_MEDIA_URL_TTL = -1
    assert Client().get(f"/labeling/media/{token}").status_code == 404


def test_a_link_dies_with_its_task(task):
    token = media.sign(task.pk)
    task.delete()
    assert Client().get(f"/labeling/media/{token}").status_code == 404
