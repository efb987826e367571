"""The pipeline editor's pages (apps/jobs/views/editor.py): what the editor starts from, the validation it asks
for, who may open it, the links to it, and that what it saves is the spec the YAML editor and the API read.

The editor itself (static/js/editor/) is driven in a browser by tests/e2e/test_editor.py.
"""

from __future__ import annotations

import html
import json
import re

import pytest
import yaml
from django.test import Client
from django.urls import reverse

from apps.jobs.models import JobTemplate, Pipeline
from apps.jobs.yaml_io import load_pipeline
from apps.projects.models import ProjectSecret, Role
from tests.conftest import user_client
from tests.factories import UserFactory, add_member, dataset, pipeline, python_template


def url(name: str, project: str = "project-a", **kwargs) -> str:
    return reverse(f"jobs:{name}", kwargs={"project": project, **kwargs})


def script_data(response, element_id: str):
    """The JSON of a `json_script` element of the page."""
    match = re.search(
        rf'<script id="{element_id}" type="application/json">(.*?)</script>', response.content.decode(), re.S
    )
    assert match, f"no #{element_id} in the page"
    return json.loads(html.unescape(match.group(1)))


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(world) -> Client:
    return client_of(world.alice)


@pytest.fixture
def pipe(world) -> Pipeline:
    return pipeline(
        world.project_a,
        world.alice,
        [{"name": "make", "args": {"code": "1"}}, {"name": "use", "depends_on": ["make"], "args": {"code": "2"}}],
        parallelism=2,
    )


def validate(client: Client, body, project: str = "project-a"):
    return client.post(url("pipeline-validate", project), json.dumps(body), content_type="application/json")


# --- the editor page ---------------------------------------------------------------------------------


def test_the_editor_starts_from_the_pipeline_its_layout_and_the_projects_templates(alice, pipe, world):
    pipe.layout = {"nodes": {"make": {"x": 10, "y": 20}, "use": {"x": 300, "y": 20}}}
    pipe.save()
    python_template(world.project_a, slug="own-step", category="mine", description="The project's own step")

    response = alice.get(url("pipeline-editor", pk=pipe.pk))

    assert response.status_code == 200
    data = script_data(response, "editor-data")
    assert data["project"] == "project-a"
    assert data["pipeline"] == {
        "id": pipe.pk,
        "name": "pipe",
        "description": "",
        "spec": pipe.spec,
        "layout": pipe.layout,
    }
    by_slug = {t["slug"]: t for t in data["templates"]}
    assert {"py", "own-step", "dataset-load"} <= set(by_slug)  # the built-ins come from a data migration
    assert by_slug["own-step"]["own"] is True
    assert by_slug["own-step"]["category"] == "mine"
    assert by_slug["py"]["own"] is False
    assert by_slug["py"]["args"] == [
        {
            "type": "text",
            "x-portal-type": "text",
            "description": "Python source to run",
            "name": "code",
            "required": True,
        }
    ]
    assert data["urls"]["api"] == "/api/v1/pipelines/"
    assert data["urls"]["validate"] == url("pipeline-validate")
    assert data["can_run"] is True
    messages = script_data(response, "editor-messages")
    assert messages["saved"] == "Saved."
    body = response.content.decode()
    assert '<script type="module" src="/static/js/editor/editor.js"></script>' in body
    assert "/static/vendor/x6/x6.min.js" in body
    assert "/static/vendor/dagre/dagre.min.js" in body
    assert "//cdn" not in body.lower()  # no CDN host (a bare "cdn" could be inside the CSRF token)


def test_arguments_come_in_the_schemas_order_with_their_widget_types(alice, world):
    schema = {
        "type": "object",
        "properties": {
            "zeta": {"type": "integer", "default": 3, "minimum": 1},
            "alpha": {"type": "string", "enum": ["a", "b"]},
            "data": {"type": "string", "x-portal-type": "dataset"},
            "flag": {"type": "boolean"},
        },
        "x-portal-order": ["zeta", "alpha", "data", "flag"],
        "required": ["data"],
    }
    JobTemplate.objects.create(project=world.project_a, slug="typed", name="Typed", args_schema=schema)

    data = script_data(alice.get(url("pipeline-editor-new")), "editor-data")

    typed = next(t for t in data["templates"] if t["slug"] == "typed")
    assert [(a["name"], a["type"], a["required"]) for a in typed["args"]] == [
        ("zeta", "int", False),
        ("alpha", "enum", False),
        ("data", "dataset", True),
        ("flag", "bool", False),
    ]
    assert typed["args"][0]["default"] == 3
    assert typed["args"][0]["minimum"] == 1
    assert typed["args"][1]["enum"] == ["a", "b"]


def test_the_newest_version_is_offered_and_the_projects_own_wins_over_a_built_in(alice, world):
    python_template(slug="step")  # built-in v1
    JobTemplate.objects.create(slug="step", version=2, name="Built-in v2", args_schema={})
    python_template(world.project_a, slug="step", name="Own v1")
    python_template(slug="other")
    JobTemplate.objects.create(slug="other", version=2, name="Other v2", args_schema={})

    data = script_data(alice.get(url("pipeline-editor-new")), "editor-data")

    offered = {t["slug"]: (t["name"], t["version"], t["own"]) for t in data["templates"] if t["latest"]}
    assert offered["step"] == ("Own v1", 1, True)
    assert offered["other"] == ("Other v2", 2, False)


def test_a_node_pinned_to_an_old_version_brings_that_version_along(alice, world):
    python_template(slug="step")
    JobTemplate.objects.create(slug="step", version=2, name="v2", args_schema={})
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "template": "step@1", "args": {"code": "1"}}])

    data = script_data(alice.get(url("pipeline-editor", pk=pipe.pk)), "editor-data")

    refs = {(t["ref"], t["latest"]) for t in data["templates"] if t["slug"] == "step"}
    assert refs == {("step@2", True), ("step@1", False)}


def test_the_names_arguments_may_refer_to_are_offered_never_a_secrets_value(alice, world):
    dataset(world.project_a, world.alice, name="iris")
    dataset(world.project_b, world.charlie, name="theirs")
    ProjectSecret.objects.create(project=world.project_a, name="API_KEY", value="s3cret-value")

    response = alice.get(url("pipeline-editor-new"))

    data = script_data(response, "editor-data")
    assert data["choices"] == {"dataset": ["iris"], "model": [], "secret": ["API_KEY"]}
    assert "s3cret-value" not in response.content.decode()
    assert data["pipeline"] is None


# --- who may open it ---------------------------------------------------------------------------------


def test_an_editor_of_the_project_may_use_the_editor(world, pipe):
    bob = client_of(world.bob)

    assert bob.get(url("pipeline-editor", pk=pipe.pk)).status_code == 200
    assert bob.get(url("pipeline-editor-new")).status_code == 200
    assert validate(bob, {"spec": pipe.spec}).status_code == 200


def test_a_viewer_is_refused_the_editor(world, pipe):
    vera = UserFactory(username="vera")
    add_member(world.project_a, vera, Role.VIEWER)
    viewer = client_of(vera)

    assert viewer.get(url("pipeline-editor", pk=pipe.pk)).status_code == 403
    assert viewer.get(url("pipeline-editor-new")).status_code == 403
    assert validate(viewer, {"spec": pipe.spec}).status_code == 403


def test_an_outsider_gets_404_for_the_editor_and_the_check(world, pipe):
    charlie = client_of(world.charlie)

    assert charlie.get(url("pipeline-editor", pk=pipe.pk)).status_code == 404
    assert charlie.get(url("pipeline-editor-new")).status_code == 404
    assert validate(charlie, {"spec": pipe.spec}).status_code == 404
    # Nor through their own project: the pipeline is looked up inside the project of the URL.
    assert charlie.get(url("pipeline-editor", "project-b", pk=pipe.pk)).status_code == 404


def test_the_pipeline_pages_lead_to_the_editor_for_those_who_may_edit(alice, world, pipe):
    listing = alice.get(url("pipeline-list")).content.decode()
    assert url("pipeline-editor-new") in listing
    assert url("pipeline-create") in listing  # YAML stays available
    assert url("pipeline-editor", pk=pipe.pk) in alice.get(url("pipeline-detail", pk=pipe.pk)).content.decode()

    vera = UserFactory(username="vera")
    add_member(world.project_a, vera, Role.VIEWER)
    assert (
        url("pipeline-editor", pk=pipe.pk)
        not in client_of(vera).get(url("pipeline-detail", pk=pipe.pk)).content.decode()
    )


# --- the check ---------------------------------------------------------------------------------------


def test_the_check_answers_valid_for_a_valid_pipeline(alice, pipe):
    response = validate(alice, {"name": "pipe", "pipeline": pipe.pk, "spec": pipe.spec})

    assert response.status_code == 200
    assert response.json() == {"valid": True, "errors": {}}


def test_the_check_keys_errors_by_node_and_field_like_the_api(alice, pipe):
    spec = {
        "nodes": [
            {"name": "make", "template": "py"},
            {"name": "use", "template": "py", "depends_on": ["make", "ghost"], "args": {"code": "2"}, "retries": 99},
        ]
    }

    response = validate(alice, {"name": "pipe", "pipeline": pipe.pk, "spec": spec})

    assert response.status_code == 200
    assert response.json() == {
        "valid": False,
        "errors": {
            "nodes.make.args.code": ["required"],
            "nodes.use.depends_on": ["Unknown node “ghost”."],
            "nodes.use.retries": ["Must be a whole number from 0 to 10."],
        },
    }
    api = user_client(pipe.created_by).put(
        f"/api/v1/pipelines/{pipe.pk}/", {"name": "pipe", "spec": spec}, format="json"
    )
    assert api.status_code == 400
    assert api.json() == response.json()["errors"]  # the editor shows what saving would say


def test_the_check_names_a_cycle_and_a_name_that_is_taken(alice, pipe, world):
    pipeline(world.project_a, world.alice, [{"name": "x", "args": {"code": "1"}}], name="taken")
    spec = {
        "nodes": [
            {"name": "a", "template": "py", "args": {"code": "1"}, "depends_on": ["b"]},
            {"name": "b", "template": "py", "args": {"code": "2"}, "depends_on": ["a"]},
        ]
    }

    errors = validate(alice, {"name": "taken", "pipeline": pipe.pk, "spec": spec}).json()["errors"]

    assert errors == {
        "name": ["A pipeline with this name already exists in the project."],
        "nodes": ["cycle: a → b → a"],
    }
    # Its own name is not a clash, a new pipeline's missing or malformed name is.
    assert "name" not in validate(alice, {"name": "pipe", "pipeline": pipe.pk, "spec": pipe.spec}).json()["errors"]
    assert validate(alice, {"name": "", "spec": pipe.spec}).json()["errors"] == {
        "name": ["This field may not be blank."]
    }
    assert validate(alice, {"name": "has space", "spec": pipe.spec}).json()["errors"]["name"]


def test_a_body_that_is_not_a_json_object_is_a_bad_request(alice):
    not_json = alice.post(url("pipeline-validate"), "{nope", content_type="application/json")
    a_list = alice.post(url("pipeline-validate"), "[1]", content_type="application/json")

    assert not_json.status_code == 400
    assert not_json.json()["errors"] == {"spec": ["The body must be JSON."]}
    assert a_list.status_code == 400
    assert a_list.json()["errors"] == {"spec": ["The body must be a JSON object."]}
    assert validate(alice, {"spec": None}).json() == {
        "valid": False,
        "errors": {"spec": ["The spec must be a mapping."]},
    }


def test_the_check_needs_a_post(alice):
    assert alice.get(url("pipeline-validate")).status_code == 405


# --- what the editor saves ---------------------------------------------------------------------------


def test_what_the_editor_saves_is_what_yaml_and_the_api_read(alice, world):
    """The editor saves through PUT /api/v1/pipelines/<id>/ the spec it was given plus its layout. A pipeline
    written as YAML comes back from the editor unchanged, and its YAML export is the document it came from."""
    python_template()
    text = yaml.safe_dump(
        {
            "apiVersion": "portal/v1",
            "kind": "Pipeline",
            "metadata": {"name": "roundtrip", "description": "From YAML"},
            "spec": {
                "parallelism": 1,
                "env": {"A": "1"},
                "nodes": [
                    {"name": "make", "template": "py", "args": {"code": "print(1)"}, "retries": 2, "cache": False},
                    {"name": "use", "template": "py@1", "depends_on": ["make"], "args": {"code": "2"}},
                ],
            },
        },
        sort_keys=False,
    )
    api = user_client(world.alice)
    created = api.post("/api/v1/pipelines/import/", {"project": "project-a", "yaml": text}, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    given = script_data(alice.get(url("pipeline-editor", pk=pk)), "editor-data")["pipeline"]

    layout = {"nodes": {"make": {"x": 40, "y": 40}, "use": {"x": 300, "y": 40}}}
    saved = api.put(
        f"/api/v1/pipelines/{pk}/",
        {"name": given["name"], "description": given["description"], "spec": given["spec"], "layout": layout},
        format="json",
    )

    assert saved.status_code == 200, saved.content
    stored = Pipeline.objects.get(pk=pk)
    assert (stored.spec, stored.layout) == (load_pipeline(text)[2], layout)
    exported = api.get(f"/api/v1/pipelines/{pk}/export/").content.decode()
    assert load_pipeline(exported) == load_pipeline(text)  # (PostgreSQL's jsonb does not keep the keys' order)
    # Saving from the YAML editor afterwards keeps the editor's layout.
    alice.post(url("pipeline-detail", pk=pk), {"yaml": text})
    assert Pipeline.objects.get(pk=pk).layout == layout


# --- hostile input (issue 27) -------------------------------------------------------------------------------------


def test_validate_refuses_a_nul_in_the_spec_naming_where(alice, pipe):
    spec = {"nodes": [{"name": "a", "template": "py", "args": {"code": "1\x00"}}]}

    response = validate(alice, {"spec": spec})

    assert response.status_code == 400
    assert response.json() == {
        "valid": False,
        "errors": {"spec": ["nodes.0.args.code: Text may not contain NUL (\\u0000) characters."]},
    }


def test_validate_refuses_a_spec_nested_50000_deep(alice, pipe):
    body = '{"spec": ' + "[" * 50_000 + "]" * 50_000 + "}"

    response = alice.post(url("pipeline-validate"), body, content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"valid": False, "errors": {"spec": ["Nested deeper than 100 levels."]}}


def test_the_editor_knows_how_many_replicas_hold_a_distributed_templates_resources(alice, world):
    python_template()
    python_template(
        world.project_a, slug="ddp", kind="distributed", framework="pytorch", replicas={"master": 1, "worker": 3}
    )

    response = alice.get(url("pipeline-editor-new"))

    by_slug = {t["slug"]: t for t in script_data(response, "editor-data")["templates"]}
    assert (by_slug["ddp"]["replica_count"], by_slug["py"]["replica_count"]) == (4, 1)
    messages = script_data(response, "editor-messages")
    assert (
        messages["overLimitReplicas"] == "%(replicas)s replicas ask for %(total)s; the limit is %(limit)s (%(source)s)."
    )
