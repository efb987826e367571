"""/api/v1/pipelines/: create (the spec validated as a whole, errors keyed by node and field), YAML export
and import, and starting runs.

Who may reach which endpoint is test_access_matrix.py's job; these tests check content and effects.
"""

from __future__ import annotations

import json

import pytest
import yaml

from apps.jobs.models import Pipeline, PipelineRun
from apps.jobs.yaml_io import load_pipeline
from apps.projects.models import Role
from tests.conftest import user_client
from tests.factories import UserFactory, add_member, pipeline, python_template

LIST_URL = "/api/v1/pipelines/"
IMPORT_URL = f"{LIST_URL}import/"


def detail_url(pk: int, action: str = "") -> str:
    return f"{LIST_URL}{pk}/" + (f"{action}/" if action else "")


def two_steps() -> dict:
    return {
        "priority": 3,
        "nodes": [
            {"name": "make", "template": "py", "args": {"code": "print(1)"}},
            {"name": "use", "template": "py", "depends_on": ["make"], "args": {"code": "print(2)"}},
        ],
    }


@pytest.fixture
def alice(world):
    python_template()
    return user_client(world.alice)


def create(client, project, spec: dict, name: str = "pipe"):
    return client.post(LIST_URL, {"project": project.slug, "name": name, "spec": spec}, format="json")


# --- create -----------------------------------------------------------------------------------


def test_create_stores_the_spec_as_written(alice, world):
    spec = two_steps()

    response = create(alice, world.project_a, spec)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "pipe"
    assert body["project"] == "project-a"
    assert body["spec"] == spec  # not normalized: "py" keeps meaning the newest version
    saved = Pipeline.objects.get(pk=body["id"])
    assert saved.project == world.project_a
    assert saved.spec == spec
    assert saved.created_by == world.alice


def test_it_rejects_a_cyclic_pipeline_naming_the_cycle(alice, world):
    spec = {
        "nodes": [
            {"name": "a", "template": "py", "depends_on": ["b"], "args": {"code": "1"}},
            {"name": "b", "template": "py", "depends_on": ["a"], "args": {"code": "2"}},
        ]
    }

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400
    assert response.json() == {"nodes": ["cycle: a → b → a"]}
    assert not Pipeline.objects.exists()


def test_bad_arguments_are_keyed_by_node_and_argument(alice, world):
    spec = {"nodes": [{"name": "fit", "template": "py", "args": {"code": 42}}]}

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400
    assert response.json() == {"nodes.fit.args.code": ["42 is not a string"]}


def test_a_missing_required_argument_is_keyed_by_the_argument(alice, world):
    response = create(alice, world.project_a, {"nodes": [{"name": "fit", "template": "py"}]})

    assert response.status_code == 400
    assert response.json() == {"nodes.fit.args.code": ["required"]}


def test_an_unknown_template_is_keyed_by_the_node(alice, world):
    spec = {"nodes": [{"name": "fit", "template": "no-such-template"}]}

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400
    assert response.json() == {"nodes.fit.template": ["Unknown template “no-such-template”."]}


def test_resources_above_the_project_quota_are_refused_naming_the_quota(alice, world):
    quota = world.project_a.quota
    quota.cpu_cores = 2
    quota.save()
    spec = {"nodes": [{"name": "fit", "template": "py", "args": {"code": "1"}, "resources": {"cpu": 4}}]}

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400
    expected = ["asks for 4 CPU cores; the limit is 2 (the project's quota)"]
    assert response.json() == {"nodes.fit.resources.cpu": expected}


def test_a_duplicate_name_is_an_error_on_name(alice, world):
    assert create(alice, world.project_a, two_steps()).status_code == 201

    response = create(alice, world.project_a, two_steps())

    assert response.status_code == 400
    assert response.json() == {"name": ["A pipeline with this name already exists in the project."]}
    assert Pipeline.objects.filter(project=world.project_a).count() == 1


def test_the_same_name_in_another_project_is_fine(alice, world):
    add_member(world.project_b, world.alice, Role.EDITOR)
    assert create(alice, world.project_a, two_steps()).status_code == 201

    response = create(alice, world.project_b, two_steps())

    assert response.status_code == 201, response.content
    assert response.json()["project"] == "project-b"


def test_malformed_json_is_a_400(alice, world):
    response = alice.post(LIST_URL, '{"project": "project-a", "name": ', content_type="application/json")

    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
    assert not Pipeline.objects.exists()


def test_an_update_validates_the_new_spec_and_keeps_the_old_one_on_error(alice, world):
    pk = create(alice, world.project_a, two_steps()).json()["id"]
    broken = {"nodes": [{"name": "fit", "template": "py", "args": {"code": "1", "extra": 2}}]}

    response = alice.patch(detail_url(pk), {"spec": broken}, format="json")

    assert response.status_code == 400
    assert response.json() == {"nodes.fit.args.extra": ["unknown argument"]}
    assert Pipeline.objects.get(pk=pk).spec == two_steps()


# --- YAML -------------------------------------------------------------------------------------


def test_export_is_yaml_that_round_trips_through_import(alice, world):
    spec = two_steps()
    pk = create(alice, world.project_a, spec).json()["id"]

    exported = alice.get(detail_url(pk, "export"))

    assert exported.status_code == 200
    assert exported["Content-Type"] == "application/yaml"
    assert exported["Content-Disposition"] == 'attachment; filename="pipe.yaml"'
    text = exported.content.decode()
    assert yaml.safe_load(text)["kind"] == "Pipeline"
    assert load_pipeline(text) == ("pipe", "", spec)

    # Importing it again updates the same pipeline (same name) with the same spec.
    again = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["id"] == pk
    assert again.json()["spec"] == spec
    assert Pipeline.objects.filter(project=world.project_a).count() == 1


def test_import_of_a_new_name_creates_a_pipeline(alice, world):
    text = yaml.safe_dump(
        {
            "apiVersion": "portal/v1",
            "kind": "Pipeline",
            "metadata": {"name": "imported", "description": "From git"},
            "spec": two_steps(),
        }
    )

    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")

    assert response.status_code == 201, response.content
    saved = Pipeline.objects.get(project=world.project_a, name="imported")
    assert saved.description == "From git"
    assert saved.spec == two_steps()
    assert response.json()["id"] == saved.pk


def test_import_of_an_edited_export_updates_the_spec(alice, world):
    pk = create(alice, world.project_a, two_steps()).json()["id"]
    document = yaml.safe_load(alice.get(detail_url(pk, "export")).content)
    document["spec"]["nodes"][1]["args"]["code"] = "print('changed')"

    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": yaml.safe_dump(document)}, format="json")

    assert response.status_code == 201, response.content
    assert Pipeline.objects.get(pk=pk).spec["nodes"][1]["args"] == {"code": "print('changed')"}


def test_import_with_a_yaml_syntax_error_says_where(alice, world):
    text = "apiVersion: portal/v1\nkind: Pipeline\nmetadata:\n  name: x\n    description: y\n"

    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")

    assert response.status_code == 400
    assert response.json() == {"yaml": ["line 5, column 16: mapping values are not allowed here"]}
    assert not Pipeline.objects.exists()


def test_import_with_an_invalid_spec_names_the_node(alice, world):
    text = yaml.safe_dump(
        {
            "apiVersion": "portal/v1",
            "kind": "Pipeline",
            "metadata": {"name": "bad"},
            "spec": {"nodes": [{"name": "fit", "template": "py", "args": {"code": "1"}, "retries": 99}]},
        }
    )

    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")

    assert response.status_code == 400
    assert response.json() == {"nodes.fit.retries": ["Must be a whole number from 0 to 10."]}
    assert not Pipeline.objects.exists()


def test_a_viewer_cannot_import(world):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    response = user_client(viewer).post(IMPORT_URL, {"project": "project-a", "yaml": "not: checked"}, format="json")

    assert response.status_code == 403
    assert not Pipeline.objects.exists()


# --- run --------------------------------------------------------------------------------------


def test_run_queues_a_numbered_run(alice, world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])

    first = alice.post(detail_url(pipe.pk, "run"))
    second = alice.post(detail_url(pipe.pk, "run"))

    assert first.status_code == 201, first.content
    body = first.json()
    assert body["status"] == "queued"
    assert body["number"] == 1
    assert body["pipeline"] == pipe.pk
    assert body["pipeline_name"] == "pipe"
    assert body["trigger"] == "manual"
    assert body["created_by"] == "alice"
    assert body["progress"] == {"done": 0, "total": 1}
    assert body["spec"]["nodes"][0]["template"] == "py@1"  # frozen: the exact version
    assert second.status_code == 201
    assert second.json()["number"] == 2
    assert list(PipelineRun.objects.order_by("number").values_list("number", "status")) == [
        (1, "queued"),
        (2, "queued"),
    ]


def test_run_with_ignore_cache_freezes_every_node_out_of_the_cache(alice, world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])

    plain = alice.post(detail_url(pipe.pk, "run"), {}, format="json")
    fresh = alice.post(detail_url(pipe.pk, "run"), {"ignore_cache": True}, format="json")
    wrong = alice.post(detail_url(pipe.pk, "run"), {"ignore_cache": "perhaps"}, format="json")

    assert plain.json()["spec"]["nodes"][0]["cache"] is True
    assert fresh.status_code == 201, fresh.content
    assert fresh.json()["spec"]["nodes"][0]["cache"] is False
    assert wrong.status_code == 400
    assert "ignore_cache" in wrong.json()
    assert PipelineRun.objects.count() == 2


def test_an_editor_can_run(world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])

    response = user_client(world.bob).post(detail_url(pipe.pk, "run"))

    assert response.status_code == 201
    assert response.json()["created_by"] == "bob"


def test_a_viewer_cannot_run(world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    response = user_client(viewer).post(detail_url(pipe.pk, "run"))

    assert response.status_code == 403
    assert not PipelineRun.objects.exists()


def test_an_outsider_cannot_see_the_pipeline_to_run_it(world):
    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}])

    response = user_client(world.charlie).post(detail_url(pipe.pk, "run"))

    assert response.status_code == 404
    assert not PipelineRun.objects.exists()


# --- hostile bytes and shapes (issue 27) ------------------------------------------------------------------------

HOSTILE_TEXT = [pytest.param("\x00", "NUL", id="nul"), pytest.param("\ud800", "lone surrogates", id="surrogate")]


def spec_with_code(code: str) -> dict:
    return {"nodes": [{"name": "fit", "template": "py", "args": {"code": code}}]}


@pytest.mark.parametrize(("char", "named"), HOSTILE_TEXT)
def test_a_nul_or_a_lone_surrogate_in_an_argument_is_a_400_naming_the_field(alice, world, char, named):
    body = {"project": "project-a", "name": "pipe", "spec": spec_with_code(f"print(1){char}")}

    # Sent as JSON escapes, as a client does (a lone surrogate cannot even be encoded as UTF-8).
    response = alice.post(LIST_URL, json.dumps(body), content_type="application/json")

    assert response.status_code == 400, response.content
    [message] = response.json()["spec"]
    assert message.startswith("nodes.0.args.code: Text may not contain")
    assert named in message
    assert not Pipeline.objects.exists()


def test_a_spec_nested_50000_deep_is_a_400_not_a_recursion_error(alice, world):
    body = '{"project": "project-a", "name": "deep", "spec": ' + "[" * 50_000 + "]" * 50_000 + "}"

    response = alice.post(LIST_URL, body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json() == {"detail": "Nested deeper than 100 levels."}


@pytest.mark.parametrize(("char", "named"), HOSTILE_TEXT)
def test_an_import_with_a_nul_or_a_lone_surrogate_escape_is_a_400_naming_the_field(alice, world, char, named):
    escape = "\\0" if char == "\x00" else "\\ud800"
    text = (
        'apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: hostile}\nspec:\n  nodes:\n'
        f'  - {{name: fit, template: py, args: {{code: "print(1){escape}"}}}}\n'
    )  # fmt: skip

    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")

    assert response.status_code == 400, response.content
    [message] = response.json()["spec.nodes.0.args.code"]
    assert named in message
    assert not Pipeline.objects.exists()


@pytest.mark.parametrize("text", ["[" * 50_000, "- " * 50_000 + "x", "a: {" * 5_000])
def test_an_import_nested_deeper_than_the_limit_is_a_400(alice, world, text):
    response = alice.post(IMPORT_URL, {"project": "project-a", "yaml": text}, format="json")

    assert response.status_code == 400, response.content
    [message] = response.json()["yaml"]
    assert message.endswith("Nested deeper than 100 levels.")


@pytest.mark.parametrize("cpu", ["NaN", "nan", "Infinity", "-inf", 1e308])
def test_a_cpu_that_is_no_amount_is_refused_when_saved(alice, world, cpu):
    spec = spec_with_code("1")
    spec["nodes"][0]["resources"] = {"cpu": cpu}

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["nodes.fit.resources.cpu"]
    assert not Pipeline.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("priority", 2**63),
        ("priority", -(2**63)),
        ("priority", 1_000_000_001),
        ("parallelism", 2**31),
    ],
)
def test_a_spec_number_past_its_bound_is_refused_when_saved(alice, world, field, value):
    response = create(alice, world.project_a, {**spec_with_code("1"), field: value})

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert not Pipeline.objects.exists()


@pytest.mark.parametrize(("field", "value"), [("timeout", 10**12), ("retry_backoff", 2**63), ("timeout", 0)])
def test_a_node_number_past_its_bound_is_refused_when_saved(alice, world, field, value):
    spec = spec_with_code("1")
    spec["nodes"][0][field] = value

    response = create(alice, world.project_a, spec)

    assert response.status_code == 400, response.content
    assert list(response.json()) == [f"nodes.fit.{field}"]


def test_the_largest_priority_is_saved_and_starts(alice, world):
    pk = create(alice, world.project_a, {**spec_with_code("1"), "priority": 1_000_000_000}).json()["id"]

    response = alice.post(detail_url(pk, "run"))

    assert response.status_code == 201, response.content
    assert PipelineRun.objects.get().priority == 1_000_000_000
