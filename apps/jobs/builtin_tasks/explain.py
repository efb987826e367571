"""Explain a registered scikit-learn model globally: the importance of each feature on (at most --max_rows) rows of a
dataset version, as the mean absolute SHAP value (shap's TreeExplainer for tree ensembles, its model-agnostic
permutation explainer on a small background sample otherwise), or as scikit-learn's permutation importance (the drop
in accuracy when a feature's values are shuffled) when shap is not installed, fails, or --method permutation asks.

Writes explanation.json (the method, the rows, each feature's importance) and feature_importance.json (the same as a
table, MLflow's table format), logs both to a new tracking run with a metric per feature, and tags the version with
that run (portal.explanation), so the version page shows the chart. Runs in the "train" task environment (shap:
requirements-train.txt). docs/explainability.md."""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import (
    TaskError,
    fail,
    features_and_labels,
    flag,
    log,
    model_and_rows_args,
    output_dir,
    parser,
    read_csv,
    resolve_input,
    write_json,
)

METHODS = ("auto", "shap", "permutation")
EXPLANATION = "explanation.json"
TABLE = "feature_importance.json"
COLUMNS = ["feature", "importance", "std"]
RUN_TAG = "portal.explanation"  # on the version: the id of the run that logged its explanation
EXPLAINS_TAG = "portal.explains"  # on that run: name/version of the version it explains
TREES = ("Forest", "Trees", "Tree", "GradientBoosting", "XGB", "LGBM", "CatBoost")


def build_parser() -> argparse.ArgumentParser:
    p = parser("explain", __doc__)
    model_and_rows_args(p)
    p.add_argument(*flag("max_rows"), type=int, default=500, help="rows explained at most (a seeded sample)")
    p.add_argument(*flag("background"), type=int, default=50, help="background rows of the model-agnostic explainer")
    p.add_argument(*flag("method"), choices=METHODS, default="auto", help="auto: SHAP, else permutation importance")
    p.add_argument(*flag("seed"), type=int, default=42, help="seed of the row sample and of the permutations")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_rows < 1:
        return fail(f"--max_rows must be at least 1, got {args.max_rows}")
    if args.background < 1:
        return fail(f"--background must be at least 1, got {args.background}")
    from apps.jobs.builtin_tasks import _onnx
    from apps.jobs.builtin_tasks.onnx_optimise import fetch, model_reference

    try:
        reference, registered = model_reference(args.model.strip())
        try:
            folder = fetch(reference, registered)
        except TaskError as exc:  # the registry's answer (not found, not allowed): a bad --model
            raise TaskError(f"--model {reference}: {exc}") from None
        source = _onnx.load_source(folder)
        if source.flavour != "sklearn":
            raise TaskError(f"--model: a {source.flavour} model; this task explains scikit-learn models only")
        header, rows = dataset_rows(args)
        label = label_column(args.label_column.strip(), header, source)
        names, x, labels = features_and_labels(header, rows, label, source.features)
        result = explain(source.model, names, x, labels, args)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    result["model"] = reference
    out = output_dir()
    write_json(out / EXPLANATION, result)
    table = {"columns": COLUMNS, "data": [[f["feature"], f["importance"], f["std"]] for f in result["features"]]}
    write_json(out / TABLE, table)
    log(f"| feature | importance ({result['method']}) |")
    log("|---|---|")
    for row in result["features"]:
        log(f"| {row['feature']} | {row['importance']:.6g} |")
    try:
        return track(result, reference, registered)
    except TaskError as exc:
        return fail(str(exc), exc.code)


def dataset_rows(args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """The header and at most --max_rows rows (a seeded sample) of the dataset version's CSV or an upstream test.csv."""
    if args.dataset.strip():
        from apps.jobs.builtin_tasks.dataset_load import pick_csv

        path = pick_csv(Path(args.dataset), args.file.strip())
    else:
        path = resolve_input("", "test.csv", "--dataset (none given, and upstream test.csv)")
    header, rows = read_csv(path)
    if len(rows) > args.max_rows:
        rows = random.Random(args.seed).sample(rows, args.max_rows)  # nosec B311 (a sample, not a secret)
    log(f"explaining on {len(rows)} rows of {path.name}")
    return header, rows


def label_column(given: str, header: list[str], source: Any) -> str:
    """The given label column, else the one column of the CSV that is not among the model's features."""
    if given:
        return given
    if not source.features:
        raise TaskError("--label_column: the model does not name its feature columns; say which column is the class")
    others = [name for name in header if name not in source.features]
    if not others:
        raise TaskError(
            "--label_column: the dataset has no column besides the model's features; it lacks the label column"
        )
    if len(others) > 1:
        raise TaskError(f"--label_column: say which of {', '.join(others)} is the class")
    return others[0]


def explain(model: Any, names: list[str], x: list[list[float]], labels: list[str], args: argparse.Namespace) -> dict:
    """{"method", "rows", "features": [{"feature", "importance", "std"}] most important first, "fallback"}."""
    import numpy as np

    features = np.asarray(x, dtype=np.float64)
    fallback = ""
    if args.method != "permutation":
        try:
            method, importance, std = shap_importance(model, features, args)
        except Exception as exc:  # shap missing, or an estimator it cannot explain: permutation importance
            if args.method == "shap":
                raise TaskError(f"--method shap: {type(exc).__name__}: {exc}", 1) from None
            fallback = f"{type(exc).__name__}: {exc}"[:300]
            log(f"warning: SHAP failed ({fallback}); falling back to permutation importance")
        else:
            return result_of(method, names, importance, std, len(features), fallback)
    method, importance, std = permutation(model, features, labels, args)
    return result_of(method, names, importance, std, len(features), fallback)


def shap_importance(model: Any, features: Any, args: argparse.Namespace) -> tuple[str, Any, Any]:
    """("shap-tree" or "shap-permutation", mean |SHAP| per feature, its standard deviation over rows): over the
    classes too for a classifier (each row's |SHAP| averaged over the classes' outputs)."""
    import numpy as np
    import shap

    estimator = model.steps[-1][1] if hasattr(model, "steps") else model
    if any(word in type(estimator).__name__ for word in TREES) and not hasattr(model, "steps"):
        log(f"SHAP TreeExplainer on {type(model).__name__}")
        values = shap.TreeExplainer(model)(features, check_additivity=False).values
        method = "shap-tree"
    else:
        rng = np.random.default_rng(args.seed)
        size = min(args.background, len(features))
        background = features[rng.choice(len(features), size=size, replace=False)]
        predict = model.predict_proba if hasattr(model, "predict_proba") else model.predict
        log(f"SHAP permutation explainer on {type(model).__name__} ({size} background rows)")
        explainer = shap.explainers.Permutation(predict, shap.maskers.Independent(background), seed=args.seed)
        values = explainer(features, silent=True).values
        method = "shap-permutation"
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    if magnitude.ndim == 3:  # (rows, features, classes)
        magnitude = magnitude.mean(axis=2)
    return method, magnitude.mean(axis=0), magnitude.std(axis=0)


def permutation(model: Any, features: Any, labels: list[str], args: argparse.Namespace) -> tuple[str, Any, Any]:
    """scikit-learn's permutation importance: the mean drop of the model's score over 5 shuffles of each column."""
    import numpy as np
    from sklearn.inspection import permutation_importance

    log(f"permutation importance of {type(model).__name__}")
    target = np.asarray(labels, dtype=object)
    classes = getattr(model, "classes_", None)
    if classes is not None and np.issubdtype(np.asarray(classes).dtype, np.number):
        target = np.asarray(labels, dtype=np.asarray(classes).dtype)  # numeric classes: numeric labels
    found = permutation_importance(model, features, target, n_repeats=5, random_state=args.seed)
    return "permutation", found.importances_mean, found.importances_std


def result_of(method: str, names: list[str], importance: Any, std: Any, rows: int, fallback: str) -> dict[str, Any]:
    features = [
        {"feature": name, "importance": round(float(value), 8), "std": round(float(spread), 8)}
        for name, value, spread in zip(names, importance, std, strict=True)
    ]
    features.sort(key=lambda f: -f["importance"])
    return {"method": method, "rows": rows, "features": features, "fallback": fallback}


def track(result: dict[str, Any], reference: str, registered: dict[str, Any] | None) -> int:
    """Log both files and a metric per feature to a new tracking run, and tag the explained version with that run.
    Without MLFLOW_TRACKING_URI: the files only."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        log("tracking skipped: MLFLOW_TRACKING_URI is not set")
        return 0
    from apps.jobs.builtin_tasks._tracking import Tracking

    out = output_dir()
    tracking = Tracking()
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
    parts = [os.environ.get("PORTAL_PIPELINE"), os.environ.get("PORTAL_RUN_ID"), os.environ.get("PORTAL_TASK")]
    version = None
    if reference.startswith("models:/"):
        version = registered if registered and "version" in registered else None
        version = version or tracking.model_version(reference[len("models:/") :])
    name_version = f"{version['name']}/{version['version']}" if version else ""
    tags = {
        "portal.task": os.environ.get("PORTAL_TASK", ""),
        EXPLAINS_TAG: name_version or reference,
        "mlflow.loggedArtifacts": json.dumps([{"path": TABLE, "type": "table"}]),
    }
    info = tracking.start_run(experiment, "-".join(filter(None, parts)) or None, tags)
    params = {"model": reference, "method": result["method"], "rows": result["rows"]}
    metrics = {f"importance_{f['feature']}": f["importance"] for f in result["features"]}
    tracking.log_batch(info["run_id"], params=params, metrics=metrics)
    tracking.upload(info["artifact_uri"], out / EXPLANATION, EXPLANATION)
    tracking.upload(info["artifact_uri"], out / TABLE, TABLE)
    tracking.end_run(info["run_id"])
    write_json(out / "tracking.json", {"run_id": info["run_id"], "artifact_uri": info["artifact_uri"]})
    log(f"logged {EXPLANATION} and {TABLE} to run {info['run_id']}")
    if version:
        body = {"name": version["name"], "version": str(version["version"]), "key": RUN_TAG, "value": info["run_id"]}
        tracking.call("POST", "model-versions/set-tag", body)
        log(f"tagged {name_version} with {RUN_TAG}={info['run_id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
