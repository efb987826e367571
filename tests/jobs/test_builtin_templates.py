"""fixtures/job_templates.yaml and its loader: idempotent, versioned, and in step with the task scripts."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured
from jsonschema import Draft202012Validator

from apps.jobs.args import ordered_properties, to_cli_args, validate_args, validate_args_schema, with_order
from apps.jobs.builtin import FIXTURE, load_builtin_templates
from apps.jobs.models import JobTemplate

PORTAL_TYPES = {"str", "text", "int", "float", "bool", "enum", "json", "dataset", "model", "secret"}
ENTRIES = yaml.safe_load(FIXTURE.read_text())
SLUGS = [entry["slug"] for entry in ENTRIES]


def entry(slug: str) -> dict:
    return next(e for e in ENTRIES if e["slug"] == slug)


@pytest.fixture
def no_builtins(db) -> None:
    """Start from no built-in rows of these slugs. The test database is shared with tests that commit
    (agent processes), so rows may exist; the delete is rolled back with the test."""
    JobTemplate.objects.filter(project__isnull=True, slug__in=SLUGS).delete()


def write_fixture(path: Path, entries: list[dict]) -> Path:
    path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


def test_loading_twice_changes_nothing(no_builtins) -> None:
    first = load_builtin_templates()
    second = load_builtin_templates()

    assert [t.slug for t in first] == SLUGS
    assert [t.pk for t in second] == [t.pk for t in first]
    assert JobTemplate.objects.filter(project__isnull=True, slug__in=SLUGS).count() == len(SLUGS)
    assert {t.version for t in second} == {1}


def test_a_changed_template_gets_version_2_and_keeps_version_1(no_builtins, tmp_path: Path) -> None:
    original = load_builtin_templates()
    changed = [dict(e) for e in ENTRIES]
    changed[0] = {**changed[0], "timeout": changed[0]["timeout"] + 1}

    reloaded = load_builtin_templates(write_fixture(tmp_path / "templates.yaml", changed))

    assert reloaded[0].ref == f"{SLUGS[0]}@2"
    assert reloaded[0].timeout == ENTRIES[0]["timeout"] + 1
    assert JobTemplate.objects.get(slug=SLUGS[0], version=1).pk == original[0].pk
    assert [t.pk for t in reloaded[1:]] == [t.pk for t in original[1:]]
    # Loading the same change again is a no-op; going back to the original is a change again.
    assert load_builtin_templates(tmp_path / "templates.yaml")[0].version == 2
    assert load_builtin_templates()[0].version == 3


def test_loaded_rows_hold_the_fixture_and_belong_to_no_project(no_builtins) -> None:
    loaded = load_builtin_templates()

    for template, fields in zip(loaded, ENTRIES, strict=True):
        assert template.project_id is None
        expected = {**fields, "args_schema": with_order(fields["args_schema"])} if "args_schema" in fields else fields
        assert {name: getattr(template, name) for name in fields} == expected
        # The authors' argument order survives PostgreSQL's jsonb, which sorts keys.
        assert list(ordered_properties(template.args_schema)) == list(
            fields.get("args_schema", {}).get("properties", {})
        )


def test_a_bad_fixture_changes_nothing(no_builtins, tmp_path: Path) -> None:
    broken = [dict(e) for e in ENTRIES]
    broken[-1] = {**broken[-1], "kind": "nonsense"}

    with pytest.raises(ImproperlyConfigured, match="kind"):
        load_builtin_templates(write_fixture(tmp_path / "templates.yaml", broken))

    assert not JobTemplate.objects.filter(project__isnull=True, slug__in=SLUGS).exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"comand": ["x"]}, "unknown field"),
        ({"command": "python -m x"}, "command must be a non-empty list"),
        ({"args_schema": {"type": "object", "properties": {"x": {"type": "strin"}}}}, "not valid JSON Schema"),
    ],
)
def test_the_loader_rejects_a_malformed_entry(tmp_path: Path, change: dict, message: str) -> None:
    path = write_fixture(tmp_path / "templates.yaml", [{**ENTRIES[0], **change}])

    with pytest.raises(ImproperlyConfigured, match=message):
        load_builtin_templates(path)


@pytest.mark.parametrize("slug", SLUGS)
def test_args_schema_is_valid_and_every_property_has_a_portal_type(slug: str) -> None:
    schema = entry(slug)["args_schema"]

    Draft202012Validator.check_schema(schema)
    validate_args_schema(schema)  # the portal's own rules (x-portal-type fits the type, flag-like names)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) <= set(schema["properties"])
    for name, prop in schema["properties"].items():
        assert prop.get("x-portal-type") in PORTAL_TYPES, name
        assert prop.get("description"), name
        assert "type" in prop, name
        if prop["x-portal-type"] == "enum":
            assert prop["enum"], name
        if "default" in prop:
            Draft202012Validator(prop).validate(prop["default"])


SAMPLE = {
    "str": "x",
    "text": "echo hi",
    "int": 3,
    "float": 0.5,
    "bool": True,
    "json": {"a": 1},
    "secret": "s",
    "dataset": "/datasets/iris",  # what the portal hands the script: the version's local folder
    "model": "/models/iris",
}


@pytest.mark.parametrize("slug", SLUGS)
def test_the_script_accepts_every_argument_of_its_schema(slug: str) -> None:
    """Each property is a flag of the script and each flag a property, so args the portal accepts reach the
    script as flags it knows (through the portal's own validation and command-line building)."""
    template = entry(slug)
    command = template["command"]
    # torch templates run in the "train" environment, the LLM ones in "llm" (transformers + peft)
    expected = (
        "{python:llm}"
        if slug.startswith("llm-")
        else "{python:train}"
        if template["framework"] == "pytorch" or slug in {"onnx-optimise", "explain", "spark-features"}  # onnx, shap…
        else "{python}"
    )
    assert command[0] == expected
    assert command[1] == "-m"
    assert command[2].startswith("apps.jobs.builtin_tasks.")
    parser = importlib.import_module(command[2]).build_parser()
    schema = template["args_schema"]

    values = {}
    for name, prop in schema["properties"].items():
        kind = prop["x-portal-type"]
        values[name] = (
            prop["enum"][-1]
            if kind == "enum"
            else SAMPLE[kind]
            if kind == "bool"
            else prop.get("default", SAMPLE[kind])
        )
        if name == "url":
            values[name] = "http://127.0.0.1/"
    argv = to_cli_args(schema, validate_args(schema, values, slug))
    parser.parse_args(argv)  # exits on an unknown flag or a bad value

    flags = {action.dest for action in parser._actions if action.dest != "help"}
    assert flags == set(schema["properties"])
    for name, prop in schema["properties"].items():
        if "default" in prop:
            assert parser.get_default(name) == prop["default"], name


@pytest.mark.parametrize("slug", SLUGS)
def test_template_shape(slug: str) -> None:
    template = entry(slug)

    # A distributed template may give a default strategy (docs/distributed.md).
    assert set(template) - {"side_effects", "strategy"} == {
        "slug",
        "name",
        "category",
        "description",
        "image",
        "command",
        "env",
        "args_schema",
        "resources",
        "kind",
        "framework",
        "replicas",
        "timeout",
    }
    assert template["resources"]["cpu"] > 0
    # What changes the world outside its outputs is never taken from the cache (issue 26.1).
    assert template.get("side_effects", False) == (
        slug in {"model-register", "notify", "onnx-optimise", "explain", "automl", "spark-features", "deploy"}
    )
    if template["kind"] == "distributed":
        assert template["framework"] in {"pytorch", "tf", "spark"}
        # the LoRA fine-tune trains on one replica unless asked (DDP from two)
        expected = {"llm-lora-finetune": {"worker": 1}, "spark-features": {"driver": 1, "executor": 1}}
        assert template["replicas"] == expected.get(slug, {"worker": 2})
    else:
        assert template["replicas"] == {}
