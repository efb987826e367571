"""runs/search: MLflow's filter grammar, order_by and page tokens; experiments/search."""

from __future__ import annotations

import pytest

from apps.models import search
from apps.models.metrics import encode_token
from apps.models.models import Run
from tests.models.conftest import assert_error
from tests.portal.test_statement_timeout import slow_statement


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


# --- hostile filters (issue 27): bounded, linear, never a 500 ------------------------------------


def test_clauses_on_every_entity_combine(api_a, runs):
    experiment_id, _ids = runs
    both = "metrics.acc > 0.6 AND params.model = 'rf' AND tags.team LIKE 'n%' AND tags.`with space` IS NOT NULL"
    assert names(api_a, experiment_id, filter=both) == ["r3"]
    assert names(
        api_a, experiment_id, filter="params.model != 'svm' AND tags.team IS NULL AND params.nothing IS NULL"
    ) == ["r4"]
    assert names(api_a, experiment_id, filter="params.model = 'rf' AND params.model = 'svm'") == []


def test_like_quotes_every_character_but_its_wildcards(api_a, runs):
    experiment_id, ids = runs
    body = {"run_id": ids["r4"], "tags": [{"key": "odd", "value": "a*b?[c]_d"}]}
    assert api_a.post("runs/log-batch", body).status_code == 200

    assert names(api_a, experiment_id, filter="tags.odd LIKE 'a*b?[c]_d'") == ["r4"]
    assert names(api_a, experiment_id, filter="tags.odd LIKE 'a%b_[c]%'") == ["r4"]
    assert names(api_a, experiment_id, filter="tags.odd LIKE 'aXb?[c]_d'") == []
    assert names(api_a, experiment_id, filter="tags.odd LIKE 'a*b?c%'") == []
    assert names(api_a, experiment_id, filter="tags.odd ILIKE 'A*B?[C]_D'") == ["r4"]


def test_a_like_pattern_of_thousands_of_percent_signs_collapses(api_a, runs):
    experiment_id, _ids = runs
    assert names(api_a, experiment_id, filter=f"tags.team LIKE '{'%' * 5000}'") == ["r3", "r2", "r1"]
    assert names(api_a, experiment_id, filter=f"tags.team ILIKE 'V{'%' * 5000}N'") == ["r1"]


def test_a_like_pattern_with_too_many_wildcards_is_invalid(api_a, runs):
    experiment_id, _ids = runs
    response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "filter": f"tags.team LIKE '{'%a' * 51}'"})
    assert "wildcards" in assert_error(response, 400, "INVALID_PARAMETER_VALUE")["message"]


def test_too_many_clauses_or_too_long_a_filter_is_invalid(api_a, runs):
    experiment_id, _ids = runs
    many = " AND ".join(["params.model = 'rf'"] * (search.MAX_CLAUSES + 1))
    response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "filter": many})
    assert (
        f"more than {search.MAX_CLAUSES} clauses" in assert_error(response, 400, "INVALID_PARAMETER_VALUE")["message"]
    )

    long = f"tags.team = '{'x' * search.MAX_FILTER_LENGTH}'"
    response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "filter": long})
    assert "longer than" in assert_error(response, 400, "INVALID_PARAMETER_VALUE")["message"]


def test_the_most_clauses_allowed_still_answer_correctly(api_a, runs):
    experiment_id, _ids = runs
    keyed = ["params.model = 'rf'", "metrics.acc > 0.8", "tags.team != 'nlp'", "tags.nothing IS NULL"]
    clauses = (keyed * search.MAX_CLAUSES)[: search.MAX_CLAUSES]
    assert names(api_a, experiment_id, filter=" AND ".join(clauses)) == ["r1"]


def test_the_sql_grows_linearly_with_the_clauses(runs):
    # One EXISTS per clause made PostgreSQL's planner superlinear; one select per clause in an INTERSECT is not.
    qs = Run.objects.all()
    sizes = {}
    for count in (10, 100):
        clauses = search.parse_filter(" AND ".join(f"params.p{i} = 'v' AND metrics.m{i} > 1" for i in range(count)))
        sql = str(search.filter_runs(qs, clauses).query)
        assert "EXISTS" not in sql
        assert sql.count("INTERSECT") == 2 * count - 1
        sizes[count] = len(sql)
    assert sizes[100] < 11 * sizes[10]


def test_a_page_token_with_a_negative_offset_is_invalid(api_a, runs):
    experiment_id, _ids = runs
    for offset in (-1, -(2**63)):
        token = encode_token({"offset": offset})
        response = api_a.post("runs/search", {"experiment_ids": [experiment_id], "page_token": token})
        assert_error(response, 400, "INVALID_PARAMETER_VALUE")


def test_a_search_past_the_statement_limit_is_temporarily_unavailable(api_a, settings, monkeypatch):
    settings.PORTAL_REQUEST_STATEMENT_TIMEOUT = 0.3
    experiment_id = api_a.experiment("slow")

    def slow_search(*args, **kwargs):
        slow_statement()
        return [], ""

    monkeypatch.setattr(search, "search_runs", slow_search)
    response = api_a.post("runs/search", {"experiment_ids": [experiment_id]})

    assert "longer than 0.3 s" in assert_error(response, 503, "TEMPORARILY_UNAVAILABLE")["message"]


def test_experiment_search_takes_many_tag_clauses_and_refuses_negative_offsets(api_a):
    for name, team in (("alpha", "vision"), ("beta", "nlp")):
        experiment_id = api_a.experiment(name)
        api_a.post("experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": "team", "value": team})
    many = " AND ".join(["tags.team LIKE 'vis%'", "tags.team != 'nlp'", "tags.nothing IS NULL"] * 100)

    response = api_a.post("experiments/search", {"filter": many})

    assert [e["name"] for e in response.json()["experiments"]] == ["alpha"]
    token = encode_token({"offset": -5})
    assert_error(api_a.post("experiments/search", {"page_token": token}), 400, "INVALID_PARAMETER_VALUE")
