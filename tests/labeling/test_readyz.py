"""/readyz names Label Studio (its state), without making the portal unready when only labeling is affected."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_readyz_names_label_studio_when_it_is_down(settings):
    settings.LABELING, settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "on", "http://127.0.0.1:9", "x"
    body = Client().get("/readyz").json()
    assert body["labelstudio"]["ok"] is False
    assert "down or starting" in body["labelstudio"]["detail"]
    assert "x" not in body["labelstudio"].values()  # never the token


def test_readyz_says_label_studio_answers(ls):
    body = Client().get("/readyz").json()
    assert body["labelstudio"] == {"enabled": True, "url": ls.url, "ok": True, "detail": "Label Studio answers."}


def test_readyz_without_labeling(settings):
    settings.LABELING = "off"
    assert "labelstudio" not in Client().get("/readyz").json()
