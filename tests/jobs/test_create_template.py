"""`services.create_template`: a project's template, each new one of a slug the next version (the API's create)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.models import JobTemplate
from apps.jobs.services import create_template, next_template_version

SCHEMA = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}


def make(project, slug: str = "train", **fields) -> JobTemplate:
    return create_template(project=project, slug=slug, name="Train", command=["python", "train.py"], **fields)


def test_each_template_of_a_slug_is_the_next_version_in_its_project(world):
    first, second = make(world.project_a), make(world.project_a)
    elsewhere = make(world.project_b)

    assert [first.version, second.version, elsewhere.version] == [1, 2, 1]
    assert next_template_version(world.project_a, "train") == 3
    assert next_template_version(world.project_a, "other") == 1


def test_the_argument_schema_keeps_the_authors_order(world):
    template = make(world.project_a, args_schema=SCHEMA)

    assert template.args_schema["x-portal-order"] == ["b", "a"]


def test_an_argument_schema_that_cannot_be_checked_safely_is_refused_and_nothing_is_saved(world):
    with pytest.raises(ValidationError) as caught:
        make(world.project_a, args_schema={"type": "object", "properties": {"a": {"pattern": "(a)\\1"}}})

    assert "args_schema" in caught.value.message_dict
    assert not JobTemplate.objects.filter(project=world.project_a).exists()
