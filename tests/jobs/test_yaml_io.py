"""Pipelines to and from portal/v1 YAML (apps/jobs/yaml_io.py); no database."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.yaml_io import dump_pipeline, load_pipeline

SPEC: dict[str, Any] = {
    "parallelism": 2,
    "priority": 0,
    "failure_policy": "continue",
    "env": {"PYTHONHASHSEED": "0", "MODE": "yes", "DATE": "2024-01-01", "VERSION": "1.10"},
    "nodes": [
        {
            "name": "split",
            "template": "split@1",
            "args": {"ratio": 0.2, "seed": 42},
            "depends_on": [],
            "resources": {"cpu": 1.0, "memory": 2**30, "gpu": 0.0},
            "retries": 0,
            "retry_backoff": 10,
            "timeout": None,
            "skip": False,
            "cache": True,
            "env": {},
        },
        {
            "name": "train",
            "template": "train@2",
            "args": {"epochs": 10, "learning_rate": 1e-05, "layers": [64, 32], "config": {"dropout": 0.1}},
            "depends_on": ["split"],
            "resources": {"cpu": 4.0, "memory": 8 * 2**30, "gpu": 1.0, "gpu_type": "A100"},
            "retries": 2,
            "retry_backoff": 30,
            "timeout": 7200,
            "skip": False,
            "cache": False,
            "env": {"CUDA_VISIBLE_DEVICES": "0"},
        },
        {
            "name": "evaluate",
            "template": "evaluate@1",
            "args": {"metrics": ["accuracy", "f1"], "threshold": 0.9, "notes": "first line\nsecond line\n"},
            "depends_on": ["split", "train"],
            "resources": {"cpu": 1.0, "memory": None, "gpu": 0.0},
            "retries": 0,
            "retry_backoff": 10,
            "timeout": 600,
            "skip": False,
            "cache": True,
            "env": {},
        },
        {
            "name": "register",
            "template": "register-model@3",
            "args": {"name": "iris-classifier", "stage": "on", "api_key": "", "tags": {}},
            "depends_on": ["evaluate"],
            "resources": {"cpu": 0.5, "memory": 512 * 2**20, "gpu": 0.0},
            "retries": 1,
            "retry_backoff": 0,
            "timeout": None,
            "skip": True,
            "cache": True,
            "env": {},
        },
    ],
}


def load_errors(text: str) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        load_pipeline(text)
    return exc.value.message_dict


def test_a_realistic_pipeline_survives_a_round_trip():
    description = "Split, train, evaluate and register the iris model.\nRuns nightly."

    assert load_pipeline(dump_pipeline("iris-nightly", description, SPEC)) == ("iris-nightly", description, SPEC)


def test_the_dump_is_readable_block_style_in_the_order_written():
    text = dump_pipeline("demo", "Two\nlines", {"nodes": [{"name": "a", "depends_on": ["b", "c"]}]})

    assert text == textwrap.dedent(
        """\
        apiVersion: portal/v1
        kind: Pipeline
        metadata:
          name: demo
          description: |-
            Two
            lines
        spec:
          nodes:
            - name: a
              depends_on:
                - b
                - c
        """
    )


def test_the_dump_writes_shared_objects_out_in_full():
    resources = {"cpu": 1.0}
    spec = {"nodes": [{"name": "a", "resources": resources}, {"name": "b", "resources": resources}]}

    text = dump_pipeline("shared", "", spec)

    assert "&" not in text
    assert load_pipeline(text) == ("shared", "", spec)


def test_it_reports_the_line_and_column_of_a_syntax_error():
    text = textwrap.dedent(
        """\
        apiVersion: portal/v1
        kind: Pipeline
        metadata:
          name: demo
           description: oops
        spec: {}
        """
    )

    assert load_errors(text) == {"yaml": ["line 5, column 15: mapping values are not allowed here"]}


def test_it_refuses_yaml_aliases():
    text = "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: a}\nspec:\n  x: &big [1, 2]\n  y: *big\n"

    assert load_errors(text) == {"yaml": ["line 6, column 6: anchors and aliases (*name) are not supported"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {"yaml": ["The file is empty."]}),
        ("- a\n- b\n", {"yaml": ["Expected a mapping with apiVersion, kind, metadata and spec."]}),
        (
            "apiVersion: v2\nkind: Job\nmetadata: {name: a}\nspec: {}\n",
            {"apiVersion": ["Must be portal/v1."], "kind": ["Must be Pipeline."]},
        ),
        ("apiVersion: portal/v1\nkind: Pipeline\nmetadata: {}\nspec: {}\n", {"metadata.name": ["Required."]}),
        ("apiVersion: portal/v1\nkind: Pipeline\nspec: {}\n", {"metadata": ["Must be a mapping with a name."]}),
        (
            "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: a, description: 3}\nspec: [1]\n",
            {"metadata.description": ["Must be text."], "spec": ["Must be a mapping."]},
        ),
        ("apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: a}\n", {"spec": ["Required."]}),
        (
            "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: a, labels: {}}\nspec: {}\nstatus: {}\n",
            {"metadata.labels": ["Unknown field."], "status": ["Unknown field."]},
        ),
    ],
)
def test_it_rejects_a_wrong_envelope_by_field(text, expected):
    assert load_errors(text) == expected


def test_it_rejects_a_pipeline_name_that_is_not_a_slug():
    errors = load_errors("apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: my pipeline}\nspec: {}\n")

    assert list(errors) == ["metadata.name"]


def test_a_missing_description_loads_as_empty():
    assert load_pipeline("apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: a}\nspec: {}\n") == ("a", "", {})
