"""Per-prediction explanations: `POST /v2/models/{m}[/versions/{v}]/explain` answers, for each row of an OIP v2
request, how much each feature moved the model's output away from a base value: SHAP values (Shapley values of the
model's output, features absent taking the values of background rows, what shap's Exact and Permutation explainers
compute with an `Independent` masker).

Computed here with numpy on the model's own `run`, for every framework the server loads (scikit-learn, XGBoost,
ONNX, PyTorch) that takes rows of numeric features: the shap package is not in the portal's environment, where
scikit-learn replicas run (docs/explainability.md says why and what it costs).

- up to EXACT_MAX_FEATURES features: exact Shapley values over every coalition (2^M of them);
- more: Shapley values estimated over antithetic random permutations (seeded, so an answer repeats).

Both are additive by construction, whatever the estimate's error: for each row the contributions add up to the
model's output on that row minus the base value (the mean output over the background rows).

The background is `parameters.background` (rows, as `data` of the input would be), else the request's own rows when
it holds several; a single row without a background is refused (400): there is nothing to compare it with. The
portal's service API (`POST /api/v1/services/<id>/explain/`) adds rows of the training dataset when it knows it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from apps.serving.modelserver.predictors import Predictor
from apps.serving.modelserver.protocol import BadRequest, _convert, _model_input, decode_request, parse_json

EXACT_MAX_FEATURES = 10
MAX_ROWS = 32  # rows explained per request
MAX_BACKGROUND = 100  # background rows used (more are sampled down, seeded)
MAX_FEATURES = 500
EVALUATIONS = 200_000  # model rows evaluated per explained row, at most (exact: 2^M × background)
CELLS = 4_000_000  # and at most this many values in those rows (32 MB of FP64), for models of many features
MAX_PERMUTATIONS = 64
# The outputs worth explaining, in order of preference: scores and probabilities, not class labels.
PREFERRED = ("predict_proba", "decision_function")


@dataclass
class ExplainRequest:
    """A decoded explain request: the rows, the background, the output to explain, the id to echo."""

    x: np.ndarray
    background: np.ndarray
    background_source: str  # "parameters" or "request"
    output: str
    id: str | None
    seed: int


def decode(body: bytes, predictor: Predictor, header_length: int | None = None) -> ExplainRequest:
    """The request's rows as `decode_request` reads them, plus `parameters.background`, `parameters.seed` and the
    output to explain (`outputs: [{"name": ...}]`, one; default predict_proba, else decision_function, else a
    numeric default output). Raises BadRequest."""
    spec = predictor.input
    if spec.shape is None or len(spec.shape) != 2 or spec.datatype in ("BYTES", "BOOL"):
        raise BadRequest(
            f"explain takes models of numeric features (rows of shape [rows, n]); this one takes a "
            f"{spec.datatype} input of shape {list(spec.shape or (-1,))}"
        )
    request = decode_request(body, predictor, header_length)
    x = request.x
    if len(x) > MAX_ROWS:
        raise BadRequest(f"explain takes at most {MAX_ROWS} rows per request, not {len(x)}")
    if x.shape[1] > MAX_FEATURES:
        raise BadRequest(f"explain takes models of at most {MAX_FEATURES} features, not {x.shape[1]}")
    payload = parse_json(body[:header_length] if header_length else body)
    parameters = payload.get("parameters") or {}
    output = _output(payload.get("outputs"), predictor)
    seed = parameters.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise BadRequest("parameter 'seed' must be an integer between 0 and 2^32 - 1")
    background = parameters.get("background")
    if background is None:
        if len(x) < 2:
            raise BadRequest(
                "explaining one row needs a background to compare it with: send rows of the training data as "
                "parameters.background, or several rows to explain against each other"
            )
        return ExplainRequest(x, x, "request", output, request.id, seed)
    if not isinstance(background, list) or not background:
        raise BadRequest("parameter 'background' must be a non-empty list of rows")
    array = _convert("background", background, spec.datatype)
    if array.ndim != 2:
        raise BadRequest("parameter 'background' must be a list of rows (a nested list)")
    rows = _model_input([("background", array)], predictor)
    if len(rows) > MAX_BACKGROUND:
        chosen = np.random.default_rng(seed).choice(len(rows), MAX_BACKGROUND, replace=False)
        rows = rows[np.sort(chosen)]
    return ExplainRequest(x, rows, "parameters", output, request.id, seed)


def _output(outputs: Any, predictor: Predictor) -> str:
    if outputs:
        if not isinstance(outputs, list) or len(outputs) != 1 or not isinstance(outputs[0], dict):
            raise BadRequest("'outputs' must name one output to explain: [{\"name\": ...}]")
        name = outputs[0].get("name")
        if name not in predictor.outputs:
            raise BadRequest(f"unknown output {name!r} (the model answers {', '.join(predictor.outputs)})")
        if not _numeric(predictor, name):
            numeric = ", ".join(_candidates(predictor))
            raise BadRequest(f"output {name!r} is not a numeric score; explain one of {numeric}")
        return name
    candidates = _candidates(predictor)
    if not candidates:
        raise BadRequest("the model has no numeric output to explain")
    return candidates[0]


def _numeric(predictor: Predictor, name: str) -> bool:
    if name == "predict" and "classes" in predictor.parameters:
        return False  # class labels: explain the probabilities or scores instead
    return predictor.outputs[name].datatype not in ("BYTES", "BOOL")


def _candidates(predictor: Predictor) -> list[str]:
    """The outputs that can be explained, best first: scores and probabilities (float outputs) before integers,
    which are most often class labels (an ONNX classifier's `label`)."""
    order = [n for n in PREFERRED if n in predictor.outputs] + list(predictor.default_outputs) + list(predictor.outputs)
    numeric = [n for n in dict.fromkeys(order) if _numeric(predictor, n)]
    return sorted(numeric, key=lambda n: not predictor.outputs[n].datatype.startswith("FP"))


def _evaluate(predictor: Predictor, output: str, x: np.ndarray) -> np.ndarray:
    """The output on rows `x` as a float matrix [rows, k] (a 1-D output is one column)."""
    try:
        value = np.asarray(predictor.run(x, (output,))[output], dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"the model rejected the input: {exc}") from None
    return value.reshape(len(x), -1)


def _masked(row: np.ndarray, background: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """For each coalition (a bool row of `masks`), the background rows with the coalition's features from `row`:
    [coalitions × background, features]."""
    stacked = np.where(masks[:, None, :], row[None, None, :], background[None, :, :])
    return stacked.reshape(-1, row.shape[0]).astype(row.dtype, copy=False)


def _exact(
    predictor: Predictor, output: str, row: np.ndarray, background: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shapley values [features, k] from every coalition's value v(S) = mean over the background of f(row_S, bg)."""
    m = row.shape[0]
    codes = np.arange(1 << m)
    masks = ((codes[:, None] >> np.arange(m)[None, :]) & 1).astype(bool)
    values = _evaluate(predictor, output, _masked(row, background, masks))
    values = values.reshape(1 << m, len(background), -1).mean(axis=1)  # v(S) per coalition
    sizes = masks.sum(axis=1)
    weights = np.array([math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m) for s in range(m)])
    phi = np.empty((m, values.shape[1]))
    for i in range(m):
        without = codes[(codes >> i) & 1 == 0]
        gains = values[without | (1 << i)] - values[without]
        phi[i] = (weights[sizes[without]][:, None] * gains).sum(axis=0)
    return phi, values[0], values[-1]


def _budget(features: int) -> int:
    """How many model rows one explained row may cost."""
    return min(EVALUATIONS, CELLS // features)


def _permutation(
    predictor: Predictor, output: str, row: np.ndarray, background: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Shapley values estimated over antithetic permutations: along each, a feature's contribution is the change of
    v when it joins, so each permutation's contributions add up to v(all) - v(none) exactly."""
    m = row.shape[0]
    per_permutation = (m + 1) * len(background)
    count = max(2, min(MAX_PERMUTATIONS, _budget(m) // per_permutation) // 2 * 2)
    orders = []
    for _ in range(count // 2):
        order = rng.permutation(m)
        orders += [order, order[::-1]]
    steps = np.arange(m + 1)
    masks = np.zeros((count, m + 1, m), dtype=bool)
    for p, order in enumerate(orders):
        ranks = np.empty(m, dtype=int)
        ranks[order] = np.arange(m)
        masks[p] = ranks[None, :] < steps[:, None]  # step s: the first s features of the order are present
    values = _evaluate(predictor, output, _masked(row, background, masks.reshape(-1, m)))
    values = values.reshape(count, m + 1, len(background), -1).mean(axis=2)
    phi = np.zeros((m, values.shape[2]))
    for p, order in enumerate(orders):
        phi[order] += values[p, 1:] - values[p, :-1]
    return phi / count, values[0, 0], values[0, -1], count


def explain(predictor: Predictor, request: ExplainRequest) -> dict[str, Any]:
    """The explanation document (without model name and version): method, output, names, and per row the base
    value, the output and each feature's contribution (one value per output column)."""
    x, background = request.x, request.background
    m = x.shape[1]
    exact = m <= EXACT_MAX_FEATURES and (1 << m) * len(background) <= _budget(m)
    if not exact and (m + 1) * 2 * len(background) > _budget(m):
        keep = max(1, _budget(m) // ((m + 1) * 2))
        chosen = np.random.default_rng(request.seed).choice(len(background), keep, replace=False)
        background = background[np.sort(chosen)]
    rng = np.random.default_rng(request.seed)
    rows, permutations = [], 0
    for row in x:
        if exact:
            phi, base, value = _exact(predictor, request.output, row, background)
        else:
            phi, base, value, permutations = _permutation(predictor, request.output, row, background, rng)
        rows.append({"base_value": base, "output": value, "contributions": phi})
    names = predictor.feature_names if predictor.feature_names and len(predictor.feature_names) == m else None
    classes = predictor.parameters.get("classes")
    width = rows[0]["output"].shape[0]
    columns = [str(c) for c in classes] if classes and len(classes) == width else None
    output = request.output
    document: dict[str, Any] = {
        "method": "shapley-exact" if exact else "shapley-permutation",
        "output": request.output,
        "output_columns": columns or ([output] if width == 1 else [f"{output}-{j}" for j in range(width)]),
        "feature_names": names or [f"x{i}" for i in range(m)],
        "background": {"rows": len(background), "source": request.background_source},
        "rows": rows,
    }
    if not exact:
        document["permutations"] = permutations
    if "predict" in predictor.outputs and request.output != "predict":
        try:
            labels = np.asarray(predictor.run(x, ("predict",))["predict"]).reshape(len(x), -1)[:, 0].tolist()
        except (ValueError, TypeError) as exc:
            raise BadRequest(f"the model rejected the input: {exc}") from None
        document["predict"] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in labels]
    return document
