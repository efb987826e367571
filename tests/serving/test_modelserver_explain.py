"""`POST /v2/models/<m>/explain` on real model-server processes: per-row SHAP values whose sum plus the base value is
the model's output (exact Shapley values up to 10 features, antithetic permutations beyond, additive either way), the
same values as the shap package's exact explainer, and every bad request a 400 naming the problem while the server
keeps serving."""

from __future__ import annotations

import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import joblib
import numpy as np
import pytest
from django.conf import settings

from tests.serving.replicas import IRIS_ROWS, ModelServer, infer_body, iris_model

BACKGROUND = [[5.0, 3.4, 1.5, 0.2], [6.4, 2.9, 4.3, 1.3], [6.5, 3.0, 5.5, 1.8], [5.7, 2.8, 4.1, 1.3]]
TRAIN_PYTHON = Path(settings.BASE_DIR) / ".venv-train" / "bin" / "python"


@pytest.fixture(scope="module")
def iris_path(tmp_path_factory) -> Path:
    return iris_model(tmp_path_factory.mktemp("iris"))


@pytest.fixture(scope="module")
def server(iris_path) -> Iterator[ModelServer]:
    replica = ModelServer(iris_path).start()
    yield replica
    replica.stop()


def explain(server: ModelServer, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v2/models/iris/explain", json=body, timeout=60)


def assert_additive(document: dict) -> None:
    for row in document["rows"]:
        contributions = np.array(row["contributions"])  # [features, output columns]
        assert contributions.shape == (len(document["feature_names"]), len(document["output_columns"]))
        np.testing.assert_allclose(np.array(row["base_value"]) + contributions.sum(axis=0), row["output"], atol=1e-9)


def test_contributions_add_up_to_the_models_output(server, iris_path):
    body = {**infer_body(), "id": "e1", "parameters": {"background": BACKGROUND}}
    response = explain(server, body)
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["model_name"] == "iris"
    assert document["id"] == "e1"
    assert document["method"] == "shapley-exact"
    assert document["output"] == "predict_proba"  # a classifier's probabilities, not its labels
    assert document["output_columns"] == ["0", "1", "2"]
    assert document["feature_names"] == ["x0", "x1", "x2", "x3"]
    assert document["background"] == {"rows": 4, "source": "parameters"}
    assert document["predict"] == [0, 2, 1]
    assert_additive(document)
    model = joblib.load(iris_path)
    np.testing.assert_allclose([row["output"] for row in document["rows"]], model.predict_proba(IRIS_ROWS), atol=1e-9)
    np.testing.assert_allclose(
        document["rows"][0]["base_value"], model.predict_proba(BACKGROUND).mean(axis=0), atol=1e-9
    )
    # The setosa row is setosa mostly because of its short petals.
    setosa = np.array(document["rows"][0]["contributions"])[:, 0]
    assert int(np.argmax(setosa)) in (2, 3)


def test_several_rows_without_a_background_are_explained_against_each_other(server):
    response = explain(server, {**infer_body(), "outputs": [{"name": "decision_function"}]})
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["background"] == {"rows": 3, "source": "request"}
    assert document["output"] == "decision_function"
    assert_additive(document)
    # Explained against their own mean, the rows' contributions cancel out feature by feature (Shapley values are
    # linear in the background): what one row has above the mean the others have below it.
    total = np.array([row["contributions"] for row in document["rows"]]).sum(axis=0)
    np.testing.assert_allclose(total, 0, atol=1e-9)


def test_many_features_are_estimated_over_permutations_and_stay_additive(tmp_path):
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    x, y = make_classification(n_samples=200, n_features=14, n_informative=5, random_state=0)
    joblib.dump(LogisticRegression(max_iter=500).fit(x, y), tmp_path / "model.joblib")
    replica = ModelServer(tmp_path / "model.joblib", name="iris").start()
    try:
        body = {
            "inputs": [{"name": "input-0", "shape": [2, 14], "datatype": "FP64", "data": x[:2].tolist()}],
            "parameters": {"background": x[100:130].tolist(), "seed": 7},
        }
        first, second = explain(replica, body), explain(replica, body)
    finally:
        replica.stop()
    assert first.status_code == 200, first.text
    document = first.json()
    assert document["method"] == "shapley-permutation"
    assert document["permutations"] >= 2
    assert document["permutations"] % 2 == 0
    assert_additive(document)
    assert second.json()["rows"] == document["rows"]  # seeded: the same request, the same answer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (infer_body([[5.1, 3.5, 1.4, 0.2]]), "explaining one row needs a background"),
        ({**infer_body(), "parameters": {"background": [[1, 2, 3]]}}, "3 features per row, the model takes 4"),
        ({**infer_body(), "parameters": {"background": "rows"}}, "'background' must be a non-empty list of rows"),
        ({**infer_body(), "parameters": {"background": [["a", "b", "c", "d"]]}}, "not convertible to FP64"),
        ({**infer_body(), "outputs": [{"name": "predict"}]}, "'predict' is not a numeric score"),
        ({**infer_body(), "outputs": [{"name": "y"}]}, "unknown output 'y'"),
        ({**infer_body(), "parameters": {"seed": -1}}, "'seed' must be an integer"),
        (infer_body([[1.0, 2.0, 3.0]] * 2), "3 features per row, the model takes 4"),
        (infer_body([[1.0, 2.0, 3.0, 4.0]] * 33), "at most 32 rows"),
        ({"inputs": []}, "'inputs' must be a non-empty list"),
    ],
)
def test_bad_requests_are_400_saying_why(server, body, message):
    response = explain(server, body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


def test_it_keeps_serving_after_bad_requests_and_takes_only_post(server):
    response = httpx.post(f"{server.url}/v2/models/iris/explain", content=b"{not json", timeout=10)
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]
    assert httpx.get(f"{server.url}/v2/models/iris/explain", timeout=10).status_code == 405
    assert httpx.post(f"{server.url}/v2/models/other/explain", json=infer_body(), timeout=10).status_code == 404
    assert explain(server, infer_body()).status_code == 200
    assert httpx.post(f"{server.url}/v2/models/iris/infer", json=infer_body(), timeout=10).status_code == 200


@pytest.mark.skipif(not TRAIN_PYTHON.exists(), reason="the train environment (.venv-train, with shap) is not built")
def test_the_values_are_shaps_own(iris_path):
    """The model server's numbers against the shap package's exact explainer (Independent masker over the same
    background), in the train environment, which has shap."""
    script = textwrap.dedent(f"""
        import joblib, numpy as np, shap
        from apps.serving.modelserver import explain
        from apps.serving.modelserver.loading import load
        rows, background = np.array({IRIS_ROWS}), np.array({BACKGROUND})
        request = explain.ExplainRequest(rows, background, "parameters", "predict_proba", None, 0)
        ours = np.array([row["contributions"] for row in explain.explain(load({str(iris_path)!r}), request)["rows"]])
        model = joblib.load({str(iris_path)!r})
        masker = shap.maskers.Independent(background, max_samples=len(background))
        reference = shap.explainers.Exact(model.predict_proba, masker)(rows)
        print(float(np.abs(ours - reference.values).max()))
    """)
    result = subprocess.run(
        [str(TRAIN_PYTHON), "-c", script],
        cwd=settings.BASE_DIR,
        env={**os.environ, "PYTHONPATH": str(settings.BASE_DIR)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "No module named 'shap'" in result.stderr:
        pytest.skip("shap is not installed in the train environment")
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip().splitlines()[-1]) < 1e-9
