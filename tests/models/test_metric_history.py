"""metrics/get-history: every point, in (step, timestamp) order, paged with a keyset token."""

from __future__ import annotations

import pytest

from apps.models import metrics as metric_store
from tests.models.conftest import assert_error


@pytest.mark.smoke
def test_history_pages_with_a_keyset_token(api_a):
    run_id = api_a.run(api_a.experiment("hist"))["info"]["run_id"]
    points = [{"key": "loss", "value": float(i), "timestamp": 100 + (i % 3), "step": i // 3} for i in range(250)]
    for start in range(0, 250, 100):
        assert (
            api_a.post("runs/log-batch", {"run_id": run_id, "metrics": points[start : start + 100]}).status_code == 200
        )
    # more points at one (step, timestamp) pair: the id breaks the tie, nothing is skipped or repeated
    same_place = [{**points[0], "value": 1000.0}, {**points[0], "value": 1001.0}]
    assert api_a.post("runs/log-batch", {"run_id": run_id, "metrics": same_place}).status_code == 200

    seen, token, pages = [], None, 0
    while True:
        params = {"run_id": run_id, "metric_key": "loss", "max_results": 40}
        if token:
            params["page_token"] = token
        data = api_a.get("metrics/get-history", **params).json()
        seen += [(m["step"], m["timestamp"], m["value"]) for m in data["metrics"]]
        pages += 1
        token = data.get("next_page_token")
        if not token:
            break
    assert pages == 7
    assert len(seen) == 252
    assert seen == sorted(seen, key=lambda m: (m[0], m[1]))
    assert sorted(v for _s, _t, v in seen) == [*range(250), 1000, 1001]


def test_history_without_max_results_returns_everything_and_bad_tokens_are_rejected(api_a):
    run_id = api_a.run(api_a.experiment("hist2"))["info"]["run_id"]
    api_a.post(
        "runs/log-batch",
        {"run_id": run_id, "metrics": [{"key": "m", "value": 1, "timestamp": 1, "step": s} for s in range(10)]},
    )
    data = api_a.get("metrics/get-history", run_id=run_id, metric_key="m").json()
    assert len(data["metrics"]) == 10
    assert "next_page_token" not in data
    assert api_a.get("metrics/get-history", run_id=run_id, metric_key="other").json() == {"metrics": []}
    assert_error(
        api_a.get("metrics/get-history", run_id=run_id, metric_key="m", page_token="x!"), 400, "INVALID_PARAMETER_VALUE"
    )
    assert_error(api_a.get("metrics/get-history", run_id=run_id, metric_key="m", max_results="lots"), 400,
                 "INVALID_PARAMETER_VALUE")  # fmt: skip


def test_the_token_is_opaque_and_checked():
    token = metric_store.encode_token({"s": 1, "t": 2, "i": 3})
    assert metric_store.decode_token(token, "s", "t", "i") == {"s": 1, "t": 2, "i": 3}
    with pytest.raises(Exception, match="Invalid page token"):
        metric_store.decode_token(metric_store.encode_token({"s": "1"}), "s")


@pytest.mark.parametrize("payload", [{"s": 2**63, "t": 0, "i": 0}, {"s": 0, "t": -(2**63) - 1, "i": 0}, {"s": True}])
def test_a_token_out_of_the_databases_integer_range_is_invalid(api_a, payload):
    run_id = api_a.run(api_a.experiment("e"))["info"]["run_id"]
    token = metric_store.encode_token({"s": 0, "t": 0, "i": 0, **payload})

    response = api_a.get("metrics/get-history", run_id=run_id, metric_key="m", page_token=token)

    assert_error(response, 400, "INVALID_PARAMETER_VALUE")
