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


# --- accepted but wrong (issue 27) --------------------------------------------------------------------------------


def test_a_command_given_as_a_string_is_a_400_not_run_per_character(world):
    response = user_client(world.alice).post(LIST_URL, body(command="python train.py"), format="json")

    assert response.status_code == 400
    assert response.json() == {"command": ['Give the entrypoint as a list of strings, e.g. ["python", "train.py"].']}
    assert not JobTemplate.objects.filter(slug="train").exists()


@pytest.mark.parametrize("command", [["python", 3], [["python"]], {"run": "python"}])
def test_a_command_that_is_not_a_list_of_strings_is_a_400(world, command):
    response = user_client(world.alice).post(LIST_URL, body(command=command), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["command"]


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"cpu": -1}, "cpu"),
        ({"gpu": -2}, "gpu"),
        ({"cpu": "NaN"}, "cpu"),
        ({"cpu": 1e308}, "cpu"),
        ({"memory": "-1Gi"}, "memory"),
        ({"memory": 2**80}, "memory"),
        ({"disk": 1}, "disk"),
    ],
)
def test_negative_or_absurd_default_resources_are_a_400_naming_the_resource(world, resources, field):
    response = user_client(world.alice).post(LIST_URL, body(resources=resources), format="json")

    assert response.status_code == 400, response.content
    assert list(response.json()["resources"]) == [field]
    assert not JobTemplate.objects.filter(slug="train").exists()


def test_sensible_default_resources_are_kept(world):
    resources = {"cpu": 2, "memory": "4Gi", "gpu": 1}

    response = user_client(world.alice).post(LIST_URL, body(resources=resources), format="json")

    assert response.status_code == 201, response.content
    assert JobTemplate.objects.get(slug="train").resources == resources


@pytest.mark.parametrize("timeout", [0, -5, 365 * 24 * 3600 + 1, 2**31, 2**63])
def test_a_timeout_out_of_range_is_a_400(world, timeout):
    response = user_client(world.alice).post(LIST_URL, body(timeout=timeout), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["timeout"]


def test_an_env_that_is_not_text_is_a_400(world):
    response = user_client(world.alice).post(LIST_URL, body(env={"SEED": 42}), format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["env"]
