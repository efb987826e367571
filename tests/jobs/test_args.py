"""Template argument schemas, node arguments and their command line (apps/jobs/args.py); no database."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.args import portal_type, to_cli_args, validate_args, validate_args_schema

PREFIX = "nodes.train.args"

TRAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "dataset": {"x-portal-type": "dataset", "description": "Training data"},
        "learning_rate": {"type": "number", "default": 0.01, "x-portal-type": "float"},
        "epochs": {"type": "integer", "default": 10, "minimum": 1, "x-portal-type": "int"},
        "optimizer": {"x-portal-type": "enum", "enum": ["sgd", "adam"], "default": "adam"},
        "shuffle": {"type": "boolean", "default": True, "x-portal-type": "bool"},
        "layers": {"x-portal-type": "json", "default": [64, 32]},
        "api_key": {"x-portal-type": "secret"},
        "notes": {"x-portal-type": "text"},
    },
    "required": ["dataset"],
    "additionalProperties": False,
}


def errors_of(exc: pytest.ExceptionInfo[ValidationError]) -> dict[str, list[str]]:
    return exc.value.message_dict


# --- validate_args_schema ---------------------------------------------------------------------


def test_it_accepts_a_complete_schema_and_an_empty_one():
    validate_args_schema(TRAIN_SCHEMA)
    validate_args_schema({})


def test_it_rejects_a_schema_that_is_not_valid_json_schema():
    with pytest.raises(ValidationError) as exc:
        validate_args_schema({"type": "object", "properties": {"x": {"type": "numbr"}}})

    assert list(errors_of(exc)) == ["args_schema"]
    assert "properties.x.type" in errors_of(exc)["args_schema"][0]


@pytest.mark.parametrize(
    ("prop", "expected"),
    [
        ({"x-portal-type": "image"}, "unknown x-portal-type “image”"),
        ({"description": "untyped"}, "give an x-portal-type or a JSON “type”"),
        ({"x-portal-type": "int", "type": "string"}, "does not fit"),
        ({"x-portal-type": "enum"}, "needs a non-empty “enum” list"),
        ({"type": "integer", "default": "ten"}, "the default is invalid: ten is not a whole number"),
    ],
)
def test_it_rejects_properties_it_cannot_turn_into_a_field(prop, expected):
    with pytest.raises(ValidationError) as exc:
        validate_args_schema({"type": "object", "properties": {"x": prop}})

    (message,) = errors_of(exc)["args_schema"]
    assert message.startswith("“x”: ")
    assert expected in message


def test_it_rejects_argument_names_that_cannot_be_flags_and_required_names_that_are_not_properties():
    schema = {"type": "object", "properties": {"two words": {"type": "string"}}, "required": ["missing"]}

    with pytest.raises(ValidationError) as exc:
        validate_args_schema(schema)

    messages = errors_of(exc)["args_schema"]
    assert len(messages) == 2
    assert "argument names must be" in messages[0]
    assert "“missing” is required but not among the properties" in messages[1]


def test_it_rejects_a_schema_that_is_not_an_object():
    with pytest.raises(ValidationError) as exc:
        validate_args_schema({"type": "array"})

    assert errors_of(exc) == {"args_schema": ["The argument schema must have “type”: “object”."]}


def test_it_derives_the_portal_type_from_the_json_type_when_the_schema_does_not_say():
    assert portal_type({"type": "integer"}) == "int"
    assert portal_type({"type": ["number", "null"]}) == "float"
    assert portal_type({"enum": ["a"]}) == "enum"
    assert portal_type({"type": "object"}) == "json"
    assert portal_type({"x-portal-type": "secret", "type": "string"}) == "secret"


# --- validate_args ----------------------------------------------------------------------------


def test_it_fills_defaults_in_schema_order():
    args = validate_args(TRAIN_SCHEMA, {"epochs": 3, "dataset": "iris@2"}, PREFIX)

    assert args == {
        "dataset": "iris@2",
        "learning_rate": 0.01,
        "epochs": 3,
        "optimizer": "adam",
        "shuffle": True,
        "layers": [64, 32],
    }
    assert list(args) == ["dataset", "learning_rate", "epochs", "optimizer", "shuffle", "layers"]


def test_it_does_not_share_mutable_defaults_between_nodes():
    first = validate_args(TRAIN_SCHEMA, {"dataset": "d"}, PREFIX)
    first["layers"].append(8)

    assert validate_args(TRAIN_SCHEMA, {"dataset": "d"}, PREFIX)["layers"] == [64, 32]


def test_it_accepts_an_int_for_a_float_argument():
    assert validate_args(TRAIN_SCHEMA, {"dataset": "d", "learning_rate": 1}, PREFIX)["learning_rate"] == 1


def test_it_treats_a_null_argument_as_not_given():
    args = validate_args(TRAIN_SCHEMA, {"dataset": "d", "epochs": None, "notes": None}, PREFIX)

    assert args["epochs"] == 10
    assert "notes" not in args


def test_it_reports_each_bad_argument_under_its_own_field():
    given = {"learning_rate": "0.2x", "epochs": 0, "optimizer": "rmsprop", "shuffle": "yes", "momentum": 0.9}

    with pytest.raises(ValidationError) as exc:
        validate_args(TRAIN_SCHEMA, given, PREFIX)

    assert errors_of(exc) == {
        f"{PREFIX}.dataset": ["required"],
        f"{PREFIX}.learning_rate": ["0.2x is not a number"],
        f"{PREFIX}.epochs": ["must be at least 1"],
        f"{PREFIX}.optimizer": ["rmsprop is not one of: sgd, adam"],
        f"{PREFIX}.shuffle": ["yes is not true or false"],
        f"{PREFIX}.momentum": ["unknown argument"],
    }


def test_it_does_not_take_a_boolean_for_a_number():
    with pytest.raises(ValidationError) as exc:
        validate_args(TRAIN_SCHEMA, {"dataset": "d", "epochs": True}, PREFIX)

    assert errors_of(exc) == {f"{PREFIX}.epochs": ["true is not a whole number"]}


def test_it_rejects_undeclared_arguments_unless_the_schema_allows_them():
    with pytest.raises(ValidationError) as exc:
        validate_args({}, {"anything": 1}, PREFIX)
    assert errors_of(exc) == {f"{PREFIX}.anything": ["unknown argument"]}

    open_schema = {"type": "object", "properties": {}, "additionalProperties": True}
    assert validate_args(open_schema, {"anything": 1}, PREFIX) == {"anything": 1}


def test_it_names_the_place_inside_a_json_argument():
    schema = {
        "type": "object",
        "properties": {"layers": {"type": "array", "items": {"type": "integer"}, "x-portal-type": "json"}},
    }

    with pytest.raises(ValidationError) as exc:
        validate_args(schema, {"layers": [64, "wide"]}, PREFIX)

    assert errors_of(exc) == {f"{PREFIX}.layers": ["1: wide is not a whole number"]}


def test_it_rejects_arguments_that_are_not_a_mapping():
    with pytest.raises(ValidationError) as exc:
        validate_args(TRAIN_SCHEMA, ["dataset"], PREFIX)

    assert list(errors_of(exc)) == [PREFIX]


def test_it_applies_the_portal_type_when_the_schema_gives_no_json_type():
    with pytest.raises(ValidationError) as exc:
        validate_args(TRAIN_SCHEMA, {"dataset": 7}, PREFIX)

    assert errors_of(exc) == {f"{PREFIX}.dataset": ["7 is not a string"]}


# --- to_cli_args ------------------------------------------------------------------------------


def test_it_turns_arguments_into_flags_in_schema_order():
    args = {
        "shuffle": True,
        "epochs": 3,
        "dataset": "iris@2",
        "learning_rate": 0.001,
        "optimizer": "sgd",
        "layers": [64, 32],
        "api_key": "s3cret",
    }

    assert to_cli_args(TRAIN_SCHEMA, args) == [
        "--dataset",
        "iris@2",
        "--learning_rate",
        "0.001",
        "--epochs",
        "3",
        "--optimizer",
        "sgd",
        "--shuffle",
        "--layers",
        "[64,32]",
        "--api_key",
        "s3cret",
    ]


def test_it_leaves_out_false_null_and_empty_arguments():
    args = {"dataset": "", "shuffle": False, "notes": None, "epochs": 0}

    assert to_cli_args(TRAIN_SCHEMA, args) == ["--epochs", "0"]


def test_it_passes_maps_and_lists_as_compact_json_and_extras_last():
    schema = {"type": "object", "properties": {"config": {"type": "object"}}, "additionalProperties": True}

    argv = to_cli_args(schema, {"extra": ["ä", 1], "config": {"depth": 3, "name": "x y"}})

    assert argv == ["--config", '{"depth":3,"name":"x y"}', "--extra", '["ä",1]']


def test_it_passes_a_json_argument_as_json_even_when_it_is_a_boolean():
    schema = {"type": "object", "properties": {"flag": {"x-portal-type": "json"}}}

    assert to_cli_args(schema, {"flag": False}) == ["--flag", "false"]
    assert to_cli_args(schema, {"flag": "text"}) == ["--flag", '"text"']


# --- hostile patterns (issue 27): RE2 runs them, in time linear in the input ----------------------

EVIL = "^(a+)+$"  # with a backtracking engine, each extra "a" doubles the time of a failed match


def test_it_matches_a_catastrophic_pattern_in_linear_time():
    # 2**40 steps with Python's `re`: this test would not finish.
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": EVIL}}}
    validate_args_schema(schema)

    with pytest.raises(ValidationError) as exc:
        validate_args(schema, {"name": "a" * 40 + "!"}, PREFIX)

    assert errors_of(exc) == {f"{PREFIX}.name": [f"{'a' * 40}! does not match the pattern {EVIL}"]}
    assert validate_args(schema, {"name": "a" * 40}, PREFIX) == {"name": "a" * 40}


def test_it_matches_catastrophic_property_patterns_in_linear_time():
    schema = {
        "type": "object",
        "properties": {
            "opts": {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
        },
    }
    validate_args_schema(schema)

    with pytest.raises(ValidationError) as exc:
        validate_args(schema, {"opts": {"a" * 40: "x", "a" * 40 + "!": 1}}, PREFIX)

    messages = errors_of(exc)[f"{PREFIX}.opts"]
    assert f"{'a' * 40}: x is not a whole number" in messages
    assert f"{'a' * 40}!: unknown key" in messages


def test_the_patterns_are_compiled_by_re2():
    import re2

    from portal.lib.schemas import compile_pattern

    assert isinstance(compile_pattern(EVIL), type(re2.compile("x")))


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a)a", "(?<!a)b"])
def test_it_refuses_patterns_re2_cannot_run(pattern):
    with pytest.raises(ValidationError) as exc:
        validate_args_schema({"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})

    (message,) = errors_of(exc)["args_schema"]
    assert message.startswith("properties.x.pattern: ")
    assert "linear time (RE2)" in message


def test_it_does_not_apply_a_stored_schema_that_fails_the_checks():
    # A template saved before the checks: its schema is refused, never run with a backtracking fallback.
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a|a?)+(?=b)"}}}

    with pytest.raises(ValidationError) as exc:
        validate_args(schema, {"x": "a" * 40}, PREFIX)

    assert list(errors_of(exc)) == ["args_schema"]


def test_it_refuses_unevaluated_properties_next_to_property_patterns():
    schema = {
        "type": "object",
        "properties": {"o": {"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False}},
    }

    with pytest.raises(ValidationError) as exc:
        validate_args_schema(schema)

    assert "“unevaluatedProperties” cannot be combined with “patternProperties”." in errors_of(exc)["args_schema"][0]


def test_a_schema_is_checked_once_per_language_and_each_caller_gets_its_own_answer(monkeypatch):
    from django.utils import translation

    from portal.lib import schemas

    checked = []
    original = schemas._schema_problems
    monkeypatch.setattr(schemas, "_schema_problems", lambda s: checked.append(s) or original(s))
    schema = {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}, "cached-test": {}}}

    first = schemas.schema_problems(schema)
    first.append(("mutated", "by a caller"))
    again = schemas.schema_problems(schema)
    with translation.override("zh-hans"):
        schemas.schema_problems(schema)

    assert again == first[:-1]
    assert "is not a reference inside the schema" in again[0][1]
    assert len(checked) == 2  # once in each language
    assert len(schemas.schema_problems({"type": "object", "properties": {"cached-test": {"type": "numbr"}}})) == 1
