"""Pipelines as code (`portal_client.dsl`): components and pipelines compile to the portal's YAML, the checks at
compile time, and a compiled pipeline applied to a live portal and run to success by a real worker and agent."""

from __future__ import annotations

import pytest
import yaml
from portal_client import dsl
from portal_client.dsl import DslError

from apps.jobs.models import JobTemplate
from apps.jobs.yaml_io import load_pipeline


@dsl.component(cpu=0.1)
def make_rows(count: int = 3) -> list:
    """Numbers from 0."""
    return list(range(count))


@dsl.component
def total(rows: list, scale: float = 1.0, label: str = "total") -> float:
    result = sum(rows) * scale
    print(f"{label}={result}")
    return result


@dsl.component
def report(value: float, loud: bool = False) -> None:
    import math  # a component imports what it needs: it runs as its own source

    print(("REPORT " if loud else "report ") + str(math.floor(value)))


@dsl.pipeline(name="sums", description="adds numbers up")
def sums(count: int = 4):
    rows = make_rows(count=count)
    first = total(rows=rows, scale=2.0)
    second = total(rows=rows, label="plain").set(retries=1)
    report(value=first, loud=True).after_(second)


def test_it_compiles_to_portal_v1_yaml_with_the_wiring_as_depends_on():
    document = yaml.safe_load(dsl.compile(sums, count=5))
    assert document["apiVersion"] == "portal/v1"
    assert document["metadata"] == {"name": "sums", "description": "adds numbers up"}
    nodes = {node["name"]: node for node in document["spec"]["nodes"]}
    assert list(nodes) == ["make-rows", "total", "total-2", "report"]
    assert nodes["make-rows"] == {"name": "make-rows", "template": "make-rows", "args": {"count": 5}}
    assert nodes["total"]["depends_on"] == ["make-rows"]
    assert nodes["total"]["args"] == {"scale": 2.0}
    assert nodes["total"]["env"] == {"PORTAL_DSL_WIRES": '{"rows": "make-rows"}'}
    assert nodes["total-2"]["retries"] == 1
    assert nodes["report"]["depends_on"] == ["total", "total-2"]
    # The server's own loader reads it (the envelope; the spec is validated when applied, below).
    assert load_pipeline(dsl.compile(sums))[0] == "sums"


def test_components_become_templates_with_typed_arguments():
    template = total.template()
    assert template["slug"] == "total"
    assert template["command"][:2] == ["{python}", "-c"]
    assert "def total(rows: list" in template["command"][2]
    assert "@dsl.component" not in template["command"][2]
    assert template["args_schema"]["properties"] == {
        "rows": {"type": "array"}, "scale": {"type": "number", "default": 1.0},
        "label": {"type": "string", "default": "total"},
    }  # fmt: skip
    assert make_rows.template()["resources"] == {"cpu": 0.1}
    assert make_rows.template()["description"] == "Numbers from 0."


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (lambda: total(rows=[1], scale="x"), "expected number, got str"),
        (lambda: total(rows=[1], nope=1), "unexpected keyword argument 'nope'"),
        (lambda: total(scale=1.0), "missing a required argument: 'rows'"),
        (lambda: report(value=make_rows()), "make_rows returns array, the parameter takes number"),
        (lambda: make_rows(count=True), "expected integer, got bool"),
    ],
)
def test_arguments_are_checked_when_compiling(body, message):
    @dsl.pipeline
    def broken():
        body()

    with pytest.raises(DslError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dsl.compile(broken)


def test_declaring_a_type_no_argument_can_hold_fails_at_once():
    with pytest.raises(DslError, match="not a type"):

        @dsl.component
        def bad(when: complex) -> None: ...


def test_calling_a_component_outside_a_pipeline_is_an_error_and_func_runs_it():
    with pytest.raises(DslError, match="inside a @pipeline"):
        make_rows(count=2)
    assert make_rows.func(count=2) == [0, 1]


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_compiled_pipeline_applies_and_runs_green(portal):
    client = portal.client()
    applied = client.pipelines.apply_code("project-a", sums, count=4)
    assert applied.name == "sums"
    assert sorted(JobTemplate.objects.filter(project__slug="project-a").values_list("slug", "version")) == [
        ("make-rows", 1), ("report", 1), ("total", 1),
    ]  # fmt: skip
    client.pipelines.apply_code("project-a", sums, count=4)  # nothing changed: no new template versions
    assert JobTemplate.objects.filter(project__slug="project-a").count() == 3

    run = client.runs.wait(client.runs.submit("project-a/sums").id, timeout=180)
    assert run.status == "succeeded", (run.reason, [(t.node, t.status, t.reason) for t in client.runs.tasks(run.id)])
    texts = {line.node: line.text for line in client.logs.history(run.id)}
    assert texts == {"total": "total=12.0", "total-2": "plain=6.0", "report": "REPORT 12"}
