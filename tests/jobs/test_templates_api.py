"""/api/v1/templates/: creating a project's template (a new version per change); built-ins are read-only."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from apps.jobs.models import JobTemplate
from apps.runtime.kubernetes.manifests import FRAMEWORKS
from tests.conftest import user_client
from tests.factories import python_template

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


def test_posting_a_slug_again_makes_its_next_version(world):
    client = user_client(world.alice)
    first = client.post(LIST_URL, body(), format="json")
    second = client.post(LIST_URL, body(command=["python", "train.py", "--fast"]), format="json")

    assert (first.status_code, second.status_code) == (201, 201), second.content
    assert (first.json()["ref"], second.json()["ref"]) == ("train@1", "train@2")
    assert list(JobTemplate.objects.filter(slug="train").values_list("version", flat=True).order_by("version")) == [
        1,
        2,
    ]


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


# --- hostile argument schemas (issue 27) -------------------------------------------------------


@pytest.fixture
def counting_server():
    """A real HTTP server on localhost serving a JSON Schema, counting the requests it gets."""
    hits: list[str] = []
    document = json.dumps({"type": "string", "enum": ["leaked-secret-value"]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", hits
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "schema_of",
    [
        lambda url: {"$ref": url},
        lambda url: {"type": "object", "properties": {"x": {"$ref": url}}},
        lambda url: {"type": "object", "properties": {"x": {"type": "string", "$dynamicRef": url}}},
        lambda url: {"type": "object", "$defs": {"d": {"$ref": url}}, "properties": {"x": {"$ref": "#/$defs/d"}}},
    ],
)
def test_a_reference_outside_the_schema_is_a_400_and_nothing_is_fetched(world, counting_server, schema_of):
    url, hits = counting_server

    response = user_client(world.alice).post(LIST_URL, body(args_schema=schema_of(url)), format="json")

    assert response.status_code == 400
    (message,) = [m for m in response.json()["args_schema"] if url in m]
    assert "not a reference inside the schema" in message
    assert hits == []
    assert not JobTemplate.objects.filter(slug="train").exists()


def test_a_reference_inside_the_schema_is_kept(world):
    schema = {
        "type": "object",
        "$defs": {"rate": {"type": "number", "minimum": 0}},
        "properties": {"lr": {"$ref": "#/$defs/rate", "x-portal-type": "float"}},
    }

    response = user_client(world.alice).post(LIST_URL, body(args_schema=schema), format="json")

    assert response.status_code == 201, response.content
    assert JobTemplate.objects.get(slug="train").args_schema["$defs"] == schema["$defs"]


def test_a_stored_schema_with_a_remote_reference_is_never_fetched_when_a_pipeline_uses_it(world, counting_server):
    url, hits = counting_server
    # As a template saved before the check existed would be: written straight to the table.
    schema = {"type": "object", "properties": {"x": {"type": "string", "$ref": url}}}
    python_template(world.project_a, slug="old", args_schema=schema)
    spec = {"nodes": [{"name": "a", "template": "old", "args": {"x": "guess"}}]}

    response = user_client(world.alice).post(
        "/api/v1/pipelines/", {"project": "project-a", "name": "p", "spec": spec}, format="json"
    )

    assert response.status_code == 400
    assert "invalid argument schema" in response.json()["nodes.a.template"][0]
    assert "leaked-secret-value" not in response.content.decode()
    assert hits == []


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}}, "properties.x.pattern"),
        ({"type": "object", "properties": {"x": {"type": "object", "patternProperties": {"(?=k)": {}}}}}, "x"),
    ],
)
def test_a_pattern_without_a_linear_time_engine_is_a_400_naming_the_field(world, schema, where):
    response = user_client(world.alice).post(LIST_URL, body(args_schema=schema), format="json")

    assert response.status_code == 400
    (message,) = response.json()["args_schema"]
    assert where in message
    assert "linear time (RE2)" in message
