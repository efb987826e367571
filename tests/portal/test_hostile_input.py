"""Every write endpoint of both APIs, sent what no door should take: no 5xx, ever (issue 27, acceptance 2).

Hostile input is a NUL (`\\u0000`), a lone surrogate (`\\ud800`), nesting 50,000 deep, and numbers past any column
(±2**64, 1e308, 10**400). The DRF API's operations are discovered from its OpenAPI schema (every write with a JSON
body, as tests/portal/test_api_write_contract.py discovers them), the MLflow API's from its route table, so an
endpoint added later is fuzzed the day it exists.

- Text and depth are refused at the door (`portal.lib.untrusted`): one request per operation and kind, with the value
  in every field, answers 400 naming a field (the MLflow API: INVALID_PARAMETER_VALUE); so does a NUL in the URL's
  object id.
- Numbers reach each endpoint's own validation: every field an endpoint takes (the MLflow API: every key its
  handler reads, recorded from a call with plausible values) is sent each huge number; none may answer 5xx.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from apps.models.mlflow_api import base as mlflow_base
from apps.models.mlflow_api.urls import router as mlflow_router
from tests.conftest import user_client
from tests.factories import experiment, make_token, model_version, tracking_run
from tests.portal.test_api_write_contract import OPERATIONS, concrete_url

NUL = "a\x00b"
SURROGATE = "a\ud800b"
DEPTH = 50_000
DEEP = "[" * DEPTH + "]" * DEPTH  # raw JSON: json.dumps itself would recurse past the limit
HUGE_NUMBERS = [2**64, -(2**64), 1e308, 10**400]

TEXT_KINDS = {"nul": NUL, "surrogate": SURROGATE, "deep": None}


def _body_with(fields: list[str], value: Any) -> str:
    """A JSON object giving `value` to each field (`None`: the 50,000-deep array), as raw text."""
    parts = []
    for name in fields:
        encoded = DEEP if value is None else json.dumps(value)
        parts.append(f"{json.dumps(name)}:{encoded}")
    return "{" + ",".join(parts) + "}"


# --- The DRF API (/api/v1/) ------------------------------------------------------------------------------------


def _request_properties() -> dict[tuple[str, str], list[str]]:
    """(path, method) → the fields its JSON body documents."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    found = {}
    for path, method in OPERATIONS:
        body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in body:
            body = components[body["$ref"].rsplit("/", 1)[1]]
        found[(path, method)] = sorted(body.get("properties", {})) or ["value"]
    return found


PROPERTIES = _request_properties()


@pytest.fixture
def staff_alice(world):
    world.alice.is_staff = True  # cluster writes are the platform admins'
    world.alice.save(update_fields=["is_staff"])
    return user_client(world.alice)


def _send(client, method: str, url: str, body: str):
    return getattr(client, method)(url, body, content_type="application/json")


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=lambda v: v)
def test_every_json_write_refuses_hostile_input_without_a_5xx(world, staff_alice, path, method):
    url = concrete_url(world, path)
    fields = PROPERTIES[(path, method)]
    for kind, value in TEXT_KINDS.items():
        response = _send(staff_alice, method, url, _body_with(fields, value))

        assert response.status_code == 400, (kind, url, response.status_code, response.content[:300])
        errors = response.json()
        if kind == "deep":  # refused by the parser, before any field is looked at
            assert "Nested deeper than" in str(errors), errors
        else:
            assert set(errors) <= set(fields), errors  # keyed by a field of the body
            assert "may not contain" in json.dumps(errors, ensure_ascii=False), errors
    if "{" in path:  # a NUL in the object's id or slug: refused before the view looks it up
        response = _send(staff_alice, method, re.sub(r"\{[^}]+\}", "x%00", path), "{}")

        assert response.status_code == 400, (path, response.status_code, response.content[:300])
    # A serializer validates every field whatever the others hold: one body per number reaches them all.
    for number in HUGE_NUMBERS:
        response = _send(staff_alice, method, url, _body_with(fields, number))

        assert response.status_code < 500, (url, number, response.content[:300])


# --- The MLflow API (/api/2.0/mlflow/) -------------------------------------------------------------------------


def _concrete(pattern: re.Pattern, values: dict[str, str]) -> str:
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values[m.group(1)], pattern.pattern.strip("^$"))


ROUTES = [(method, pattern) for method, pattern, _handler, _max in mlflow_router.routes]


def _route_id(route: tuple[str, re.Pattern]) -> str:
    return f"{route[0]} {route[1].pattern.strip('^$')}"


class _Recorder(dict):
    """The request's data, noting every key the handler reads."""

    read: set[str]

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.read.add(key)
        return super().__contains__(key)


@pytest.fixture
def tracked(world) -> dict[str, Any]:
    """Objects every route can act on, and plausible values of every key the MLflow API reads."""
    version = model_version(world.project_a, world.alice)
    run = tracking_run(world.project_a, world.alice, name="fuzzed")
    exp = experiment(world.project_a)
    plausible = {
        "experiment_id": str(exp.pk), "experiment_ids": [str(exp.pk)], "run_id": run.run_uuid,
        "run_uuid": run.run_uuid, "name": version.registered_model.name, "version": str(version.version),
        "key": "k", "value": "v", "timestamp": 1, "step": 0, "start_time": 1, "end_time": 2, "status": "FINISHED",
        "run_name": "r", "tags": [{"key": "t", "value": "v"}], "params": [{"key": "p", "value": "v"}],
        "metrics": [{"key": "m", "value": 1.0, "timestamp": 1, "step": 0}], "description": "d", "stage": "Staging",
        "alias": "champion", "source": f"runs:/{run.run_uuid}/model", "max_results": 10, "filter": "",
        "filter_string": "", "new_name": "renamed", "metric_key": "m", "run_ids": [run.run_uuid],
    }  # fmt: skip
    return {"token": make_token(world.alice), "plausible": plausible, "path": {"model_id": "m-1", "key": "k"}}


def _call(client: Client, token: str, method: str, endpoint: str, data: dict | str):
    url = f"/api/2.0/mlflow/{endpoint}"
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method in ("GET", "HEAD"):
        return client.get(url, data, **headers)
    body = data if isinstance(data, str) else json.dumps(data)
    return getattr(client, method.lower())(url, body, content_type="application/json", **headers)


def _plausible(tracked: dict, method: str) -> dict:
    """The plausible values (a query string: without the lists)."""
    return {k: v for k, v in tracked["plausible"].items() if method != "GET" or not isinstance(v, list)}


def _keys_read(monkeypatch, client: Client, tracked: dict, method: str, endpoint: str) -> list[str]:
    recorders: list[_Recorder] = []
    real = mlflow_base.request_data

    def recording(*args: Any, **kwargs: Any) -> dict:
        recorder = _Recorder(real(*args, **kwargs))
        recorder.read = set()
        recorders.append(recorder)
        return recorder

    monkeypatch.setattr(mlflow_base, "request_data", recording)
    _call(client, tracked["token"], method, endpoint, _plausible(tracked, method))
    monkeypatch.setattr(mlflow_base, "request_data", real)
    return sorted(str(key) for key in (recorders[0].read if recorders else set()))


@pytest.mark.parametrize("route", ROUTES, ids=_route_id)
def test_every_mlflow_route_refuses_hostile_input_without_a_5xx(monkeypatch, tracked, route):
    method, pattern = route
    endpoint = _concrete(pattern, tracked["path"])
    client = Client()
    keys = _keys_read(monkeypatch, client, tracked, method, endpoint)
    for kind, value in TEXT_KINDS.items():
        if method == "GET" and kind != "nul":  # a query string holds no surrogate (decoded with replacement) or depth
            continue
        body = dict.fromkeys(keys or ["name"], value) if method == "GET" else _body_with(keys or ["name"], value)
        response = _call(client, tracked["token"], method, endpoint, body)

        assert response.status_code == 400, (kind, endpoint, response.status_code, response.content[:300])
        assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE", response.content
    if pattern.groupindex:  # a NUL in a path segment: refused before the handler looks it up
        response = _call(client, tracked["token"], method, _concrete(pattern, {"model_id": "m%00", "key": "k%00"}), {})

        assert response.status_code == 400, (endpoint, response.status_code, response.content[:300])
    # A handler stops at its first bad parameter: each key it reads gets each number, the others plausible values.
    plausible = _plausible(tracked, method)
    for key in keys:
        for number in HUGE_NUMBERS:
            value = str(number) if method == "GET" else number
            response = _call(client, tracked["token"], method, endpoint, {**plausible, key: value})

            assert response.status_code < 500, (endpoint, key, number, response.content[:300])
