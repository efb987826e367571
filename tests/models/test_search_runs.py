"""runs/search: MLflow's filter grammar, order_by and page tokens; experiments/search."""

from __future__ import annotations

import pytest

from tests.models.conftest import assert_error


@pytest.fixture
def runs(api_a) -> tuple[str, dict[str, str]]:
    experiment_id = api_a.experiment("search")
    ids = {}
    for i, (name, acc, model, team) in enumerate(
        [("r1", 0.9, "rf", "Vision"), ("r2", 0.5, "svm", "vision-x"), ("r3", 0.7, "rf", "nlp"), ("r4", None, "lr", "")]
    ):
        run = api_a.run(experiment_id, run_name=name, start_time=1000 + i)
        run_id = run["info"]["run_id"]
        ids[name] = run_id
        body = {"run_id": run_id, "params": [{"key": "model", "value": model}]}
        if acc is not None:
            body["metrics"] = [{"key": "acc", "value": acc, "timestamp": 1, "step": 0}]
        if team:
            body["tags"] = [{"key": "team", "value": team}, {"key": "with space", "value": team.upper()}]
        assert api_a.post("runs/log-batch", body).status_code == 200
    api_a.post("runs/update", {"run_id": ids["r3"], "status": "FINISHED", "end_time": 5000})
    return experiment_id, ids


def names(api, experiment_id: str, **body) -> list[str]:
    response = api.post("runs/search", {"experiment_ids": [experiment_id], **body})
    assert response.status_code == 200, response.content
    return [r["info"]["run_name"] for r in response.json().get("runs", [])]


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("filter_string", "expected"),
    [
        ("metrics.acc > 0.6", ["r3", "r1"]),
        ("metrics.acc >= 0.5 and params.model = 'rf'", ["r3", "r1"]),
        ("metric.acc != 0.5", ["r3", "r1"]),
        ("params.model IN ('svm', 'lr')", ["r4", "r2"]),
        ("params.model NOT IN ('svm', 'lr')", ["r3", "r1"]),
        ("tags.team LIKE 'vision%'", ["r2"]),
        ("tags.team ILIKE 'vision%'", ["r2", "r1"]),
        ("tags.`with space` = 'NLP'", ["r3"]),
        ("tags.\"with space\" LIKE '%X'", ["r2"]),
        ("tags.team IS NULL", ["r4"]),
        ("attributes.status = 'FINISHED'", ["r3"]),
        ("attributes.run_name LIKE 'r_'", ["r4", "r3", "r2", "r1"]),
        ("attributes.start_time > 1001", ["r4", "r3"]),
        ("attributes.end_time = 5000", ["r3"]),
    ],
)
def test_filters(api_a, runs, filter_string, expected):
    experiment_id, _ids = runs
    assert names(api_a, experiment_id, filter=filter_string) == expected


def test_filter_by_run_id_in(api_a, runs):
    experiment_id, ids = runs
    assert names(api_a, experiment_id, filter=f"attributes.run_id IN ('{ids['r1']}', '{ids['r2']}')") == ["r2", "r1"]


@pytest.mark.smoke
@pytest.mark.parametrize(
    "filter_string",
    [
        "metrics.acc >",
        "metrics.acc > 'high'",
        "params.model = rf",
        "foo.bar = 'x'",
        "metrics.acc > 0.5 OR metrics.acc < 0.1",
        "attributes.nope = 'x'",
        "params.model ~ 'x'",
        "tags.team = 'unterminated",
        "metrics.acc LIKE '0.5'",
        "params.model IN 'rf'",
    ],
)
def test_bad_filter_syntax_is_invalid_parameter_value(api_a, runs, filter_string):
    experiment_id, _ids = runs
    response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "filter": filter_string})
    assert_error(response, 400, "INVALID_PARAMETER_VALUE")


def test_order_by_metric_param_and_attribute(api_a, runs):
    experiment_id, _ids = runs
    assert names(api_a, experiment_id, order_by=["metrics.acc DESC"]) == ["r1", "r3", "r2", "r4"]
    assert names(api_a, experiment_id, order_by=["metrics.acc ASC"]) == ["r2", "r3", "r1", "r4"]
    assert names(api_a, experiment_id, order_by=["params.model ASC", "attributes.start_time DESC"]) == [
        "r4", "r3", "r1", "r2",
    ]  # fmt: skip
    assert names(api_a, experiment_id, order_by=["attributes.run_name"]) == ["r1", "r2", "r3", "r4"]
    assert_error(
        api_a.post("runs/search", {"experiment_ids": [experiment_id], "order_by": ["metrics.acc SIDEWAYS x"]}),
        400,
        "INVALID_PARAMETER_VALUE",
    )


def test_pages(api_a, runs):
    experiment_id, _ids = runs
    seen, token = [], None
    while True:
        body = {"experiment_ids": [experiment_id], "max_results": 3, **({"page_token": token} if token else {})}
        data = api_a.post("runs/search", body).json()
        seen += [r["info"]["run_name"] for r in data["runs"]]
        token = data.get("next_page_token")
        if not token:
            break
    assert seen == ["r4", "r3", "r2", "r1"]
    bad = api_a.post("runs/search", {"experiment_ids": [experiment_id], "page_token": "garbage!"})
    assert_error(bad, 400, "INVALID_PARAMETER_VALUE")
    assert_error(api_a.post("runs/search", {"experiment_ids": [experiment_id], "max_results": 50001}), 400,
                 "INVALID_PARAMETER_VALUE")  # fmt: skip


def test_deleted_runs_follow_the_view_type(api_a, runs):
    experiment_id, ids = runs
    api_a.post("runs/delete", {"run_id": ids["r1"]})
    assert "r1" not in names(api_a, experiment_id)
    assert names(api_a, experiment_id, run_view_type="DELETED_ONLY") == ["r1"]
    assert len(names(api_a, experiment_id, run_view_type="ALL")) == 4


def test_search_experiments(api_a):
    for name in ("alpha", "beta", "alphabet"):
        api_a.experiment(name)
    response = api_a.post("experiments/search", {"filter": "name LIKE 'alpha%'", "order_by": ["name DESC"]})
    assert [e["name"] for e in response.json()["experiments"]] == ["alphabet", "alpha"]
    assert_error(api_a.post("experiments/search", {"filter": "name LIKE"}), 400, "INVALID_PARAMETER_VALUE")
