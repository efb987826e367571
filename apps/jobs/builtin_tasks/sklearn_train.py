"""Train a scikit-learn classifier on train.csv; save model.joblib and params.json, log to MLflow if configured."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import (
    TaskError,
    fail,
    features_and_labels,
    flag,
    log,
    output_dir,
    parser,
    read_csv,
    resolve_input,
    write_json,
)

MODELS = ("logistic_regression", "random_forest")


def build_parser() -> argparse.ArgumentParser:
    p = parser("sklearn_train", __doc__)
    p.add_argument(*flag("input"), default="", help="train.csv or a directory holding it (default: upstream)")
    p.add_argument(*flag("label_column"), default="species", help="the class column")
    p.add_argument(*flag("model"), choices=MODELS, default="logistic_regression", help="the estimator")
    p.add_argument(*flag("max_iter"), type=int, default=200, help="logistic regression: solver iterations")
    p.add_argument(*flag("c"), type=float, default=1.0, help="logistic regression: inverse regularisation")
    p.add_argument(*flag("n_estimators"), type=int, default=100, help="random forest: number of trees")
    p.add_argument(*flag("max_depth"), type=int, default=0, help="random forest: tree depth (0: unlimited)")
    p.add_argument(*flag("seed"), type=int, default=42, help="random seed")
    return p


def hyperparameters(args: argparse.Namespace) -> dict[str, Any]:
    if args.model == "logistic_regression":
        if args.max_iter < 1:
            raise TaskError("--max_iter must be at least 1")
        if args.c <= 0:
            raise TaskError("--c must be greater than 0")
        return {"max_iter": args.max_iter, "C": args.c, "random_state": args.seed}
    if args.n_estimators < 1:
        raise TaskError("--n_estimators must be at least 1")
    if args.max_depth < 0:
        raise TaskError("--max_depth cannot be negative (0 means unlimited)")
    return {"n_estimators": args.n_estimators, "max_depth": args.max_depth or None, "random_state": args.seed}


def make_estimator(model: str, params: dict[str, Any]) -> Any:
    if model == "logistic_regression":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(**params)
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(**params)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        params = hyperparameters(args)
        path = resolve_input(args.input, "train.csv", "input")
        header, rows = read_csv(path)
        features, x, y = features_and_labels(header, rows, args.label_column)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    classes = sorted(set(y))
    if len(classes) < 2:
        return fail(f"column {args.label_column!r} has a single class ({classes[0]!r}); nothing to learn")
    log(f"training {args.model} on {len(rows)} rows, {len(features)} features, {len(classes)} classes from {path}")

    import joblib
    from sklearn.metrics import accuracy_score

    estimator = make_estimator(args.model, params)
    estimator.fit(x, y)
    train_accuracy = float(accuracy_score(y, estimator.predict(x)))
    log(f"train accuracy: {train_accuracy:.4f}")

    out = output_dir()
    joblib.dump(estimator, out / "model.joblib")
    record = {
        "model": args.model,
        "hyperparameters": params,
        "label_column": args.label_column,
        "features": features,
        "classes": classes,
        "train_rows": len(rows),
        "train_accuracy": train_accuracy,
    }
    write_json(out / "params.json", record)
    log(f"saved {out / 'model.joblib'} and {out / 'params.json'}")
    track(args.model, params, train_accuracy, len(rows), out / "model.joblib")
    return 0


def track(model: str, params: dict[str, Any], train_accuracy: float, rows: int, artifact: Path) -> None:
    """Log to MLflow when the package is installed and MLFLOW_TRACKING_URI is set; a tracking failure is a
    warning, not a failed training."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        log("MLflow tracking skipped: MLFLOW_TRACKING_URI is not set")
        return
    if importlib.util.find_spec("mlflow") is None:
        log("MLflow tracking skipped: the mlflow package is not installed in this environment")
        return
    import mlflow

    run_name = "-".join(filter(None, [os.environ.get("PORTAL_RUN_ID"), os.environ.get("PORTAL_TASK")])) or None
    try:
        mlflow.set_tracking_uri(uri)
        if os.environ.get("MLFLOW_EXPERIMENT_NAME"):
            mlflow.set_experiment(os.environ["MLFLOW_EXPERIMENT_NAME"])
        with mlflow.start_run(run_name=run_name):
            mlflow.log_params({"model": model, **{k: str(v) for k, v in params.items()}, "train_rows": rows})
            mlflow.log_metric("train_accuracy", train_accuracy)
            mlflow.log_artifact(str(artifact))
    except Exception as exc:  # tracking is best effort: the model is already saved
        log(f"warning: MLflow tracking failed: {type(exc).__name__}: {exc}")
        return
    log(f"logged params, train_accuracy and model.joblib to MLflow (run {run_name or 'unnamed'})")


if __name__ == "__main__":
    raise SystemExit(main())
