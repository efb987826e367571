"""portal/lib/untrusted.py: the one sanitiser of untrusted strings and JSON, and the number rule of the strict
serializers (apps/projects/api/serializers.py) that uses it."""

from __future__ import annotations

import json

import pytest
from django.http import QueryDict
from django.test import RequestFactory
from rest_framework import serializers

from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer
from apps.projects.models import Quota
from portal.lib import untrusted
from portal.lib.untrusted import MAX_DEPTH, UnsafeInput


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# --- check / loads ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "named"),
    [
        ({"name": "a\x00"}, "name", "NUL"),
        ({"spec": {"nodes": [{"args": {"x": "\ud800"}}]}}, "spec.nodes.0.args.x", "lone surrogates"),
        ({"tags": {"k\x00": "v"}}, "tags", "NUL"),  # a key: the mapping that holds it is named
        ({"a": "\udfff"}, "a", "lone surrogates"),
        ("\x00", "", "NUL"),
    ],
)
def test_check_names_where_bad_text_is(data, path, named):
    with pytest.raises(UnsafeInput) as caught:
        untrusted.check(data)

    assert caught.value.path == path
    assert named in caught.value.message


def test_text_that_merely_looks_odd_passes():
    untrusted.check({"emoji": "🙂", "cjk": "数据", "escape": "\\u0000", "controls": "\t\n\x01", "pair": "\U0001f600"})


def test_depth_up_to_the_limit_passes_and_one_more_is_refused():
    untrusted.check(nested(MAX_DEPTH))

    with pytest.raises(UnsafeInput) as caught:
        untrusted.check({"spec": nested(MAX_DEPTH)})

    assert caught.value.field == "spec"
    assert caught.value.message == f"Nested deeper than {MAX_DEPTH} levels."


def test_check_walks_data_deeper_than_pythons_recursion_limit_without_crashing():
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]

    with pytest.raises(UnsafeInput):
        untrusted.check(deep)


def test_check_sees_every_value_of_a_repeated_query_key():
    with pytest.raises(UnsafeInput) as caught:
        untrusted.check(QueryDict("path=a&path=b%00"))

    assert caught.value.path == "path"


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000, '{"a":' * 50_000 + "1" + "}" * 50_000])
def test_loads_refuses_a_recursion_bomb_as_unsafe_input(text):
    with pytest.raises(UnsafeInput) as caught:
        untrusted.loads(text)

    assert caught.value.message == f"Nested deeper than {MAX_DEPTH} levels."


def test_loads_refuses_escaped_nul_and_surrogates():
    with pytest.raises(UnsafeInput):
        untrusted.loads(json.dumps({"a": "\x00"}))
    with pytest.raises(UnsafeInput):
        untrusted.loads('{"a": "\\ud800"}')
    assert untrusted.loads('{"a": "\\ud83d\\ude00"}') == {"a": "😀"}  # a surrogate *pair* is a character


# --- the query-string middleware -----------------------------------------------------------------------------------


NUL_MESSAGE = "Text may not contain NUL (\\u0000) characters."


@pytest.mark.parametrize(
    ("path", "content_type", "body"),
    [
        (
            "/api/2.0/mlflow/runs/search",
            "application/json",
            {"error_code": "INVALID_PARAMETER_VALUE", "message": f"q: {NUL_MESSAGE}"},
        ),
        ("/api/v1/datasets/", "application/json", {"q": [NUL_MESSAGE]}),
        ("/p/project-a/", "text/plain; charset=utf-8", f"q: {NUL_MESSAGE}"),
    ],
)
def test_a_nul_in_a_query_string_is_refused_in_the_shape_of_its_api(path, content_type, body):
    request = RequestFactory().get(path, {"q": "a\x00"})
    middleware = untrusted.RequestLineMiddleware(lambda r: pytest.fail("the view must not be reached"))

    response = middleware(request)

    assert response.status_code == 400
    assert response["Content-Type"] == content_type
    content = response.content.decode()
    assert (json.loads(content) if content_type == "application/json" else content) == body


def test_a_clean_query_string_goes_through():
    request = RequestFactory().get("/api/v1/datasets/", {"q": "iris"})

    assert untrusted.RequestLineMiddleware(lambda r: "reached")(request) == "reached"


# --- numbers in the strict serializers --------------------------------------------------------------------------------


class Numbers(StrictSerializer):
    count = serializers.IntegerField()
    bounded = serializers.IntegerField(min_value=0, max_value=10)
    ratio = serializers.FloatField()
    many = serializers.ListField(child=serializers.IntegerField())


GOOD = {"count": 1, "bounded": 5, "ratio": 0.5, "many": [1]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("count", 2**63),
        ("count", -(2**63) - 1),
        ("bounded", 11),
        ("ratio", "NaN"),
        ("ratio", "Infinity"),
        ("ratio", "-inf"),
        ("many", [2**64]),
    ],
)
def test_a_number_past_what_a_column_holds_is_refused_by_field(field, value):
    serializer = Numbers(data={**GOOD, field: value})

    assert not serializer.is_valid()
    assert list(serializer.errors) == [field]


def test_numbers_within_bounds_pass():
    serializer = Numbers(data={**GOOD, "count": 2**63 - 1, "ratio": -1e300})

    assert serializer.is_valid(), serializer.errors


class QuotaNumbers(StrictModelSerializer):
    concurrent_runs = serializers.IntegerField(required=False)  # declared without bounds: the column's are given

    class Meta:
        model = Quota
        fields = ["concurrent_runs"]


@pytest.mark.django_db
def test_an_integer_field_declared_without_bounds_takes_its_model_columns():
    from django.db import connection

    low, high = connection.ops.integer_field_range(Quota._meta.get_field("concurrent_runs").get_internal_type())

    assert not QuotaNumbers(data={"concurrent_runs": high + 1}).is_valid()
    assert not QuotaNumbers(data={"concurrent_runs": low - 1}).is_valid()
    assert QuotaNumbers(data={"concurrent_runs": high}).is_valid()


def test_a_nul_in_the_path_is_refused_before_any_view():
    request = RequestFactory().get("/api/v1/projects/a%00b/")
    middleware = untrusted.RequestLineMiddleware(lambda r: pytest.fail("the view must not be reached"))

    response = middleware(request)

    assert response.status_code == 400
    assert json.loads(response.content) == {"url": [NUL_MESSAGE]}


# --- multipart JSON (DRF's JSONField decodes it itself, past the JSON parser) ----------------------------------------


class WithSpec(StrictSerializer):
    spec = serializers.JSONField()


def multipart(spec: str) -> QueryDict:
    data = QueryDict(mutable=True)
    data["spec"] = spec
    return data


def test_multipart_json_nested_past_pythons_limit_is_refused_not_a_recursion_error():
    serializer = WithSpec(data=multipart("[" * 50_000 + "]" * 50_000))

    assert not serializer.is_valid()
    assert serializer.errors == {"non_field_errors": [f"Nested deeper than {MAX_DEPTH} levels."]}


def test_multipart_json_with_an_escaped_nul_is_refused_naming_the_field():
    serializer = WithSpec(data=multipart('{"nodes": ["a\\u0000"]}'))

    assert not serializer.is_valid()
    assert serializer.errors == {"spec": ["nodes.0: Text may not contain NUL (\\u0000) characters."]}
