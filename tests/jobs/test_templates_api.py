"""/api/v1/templates/: creating a project's template (a new version per change); built-ins are read-only."""

from __future__ import annotations

import pytest

from apps.jobs.models import JobTemplate
from apps.runtime.kubernetes.manifests import FRAMEWORKS
from tests.conftest import user_client

LIST_URL = "/api/v1/templates/"


def body(**fields):
    return {"project": "project-a", "slug": "train", "name": "Train", "command": ["python", "train.py"], **fields}


def test_an_unknown_framework_is_a_400_naming_the_allowed_ones(world):
    response = user_client(world.alice).post(LIST_URL, body(kind="distributed", framework="pytroch"), format="json")

    assert response.status_code == 400
    message = response.json()["framework"][0]
    assert "pytroch" in message
    for framework in FRAMEWORKS:
        assert framework in message
    assert not JobTemplate.objects.filter(slug="train").exists()


@pytest.mark.parametrize("framework", ["pytorch", "tf", "ray", ""])
def test_a_supported_framework_or_none_is_kept(world, framework):
    response = user_client(world.alice).post(LIST_URL, body(kind="distributed", framework=framework), format="json")

    assert response.status_code == 201, response.content
    assert JobTemplate.objects.get(slug="train").framework == framework


def test_the_schema_lists_the_frameworks(world):
    schema = user_client(world.alice).get("/api/v1/schema/", {"format": "json"}).json()
    framework = schema["components"]["schemas"]["JobTemplateRequest"]["properties"]["framework"]

    values = set()
    for option in framework["oneOf"]:  # the frameworks' enum, or blank
        values |= set(schema["components"]["schemas"][option["$ref"].split("/")[-1]]["enum"])
    assert values == {*FRAMEWORKS, ""}
