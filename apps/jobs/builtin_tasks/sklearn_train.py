"""Train a scikit-learn classifier on train.csv; save model.joblib and params.json, log to MLflow if configured."""

from __future__ import annotations

import argparse
import json
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
    write_mlmodel,
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
    track(estimator, args.model, params, train_accuracy, x, y, features)
    return 0


def accuracy_curve(estimator: Any, x: Any, y: list[Any], points: int = 100) -> dict[int, float]:
    """A random forest's training accuracy with its first k trees, for up to `points` values of k ending at all of
    them (the last one is its train accuracy): the curve the experiment run's page draws. Other models have no
    such steps: {}."""
    trees = getattr(estimator, "estimators_", None)
    if not trees:
        return {}
    import numpy as np

    n = len(trees)
    steps = sorted({max(1, round(n * i / points)) for i in range(1, points + 1)}) if n > points else range(1, n + 1)
    features, labels = np.asarray(x, dtype=np.float32), np.asarray(y)  # float32: what the trees take
    votes = np.zeros((len(labels), len(estimator.classes_)))
    curve: dict[int, float] = {}
    done = 0
    for k in steps:
        for tree in trees[done:k]:  # the forest predicts with the mean of its trees' class probabilities
            votes += tree.predict_proba(features)
        done = k
        curve[k] = float(np.mean(estimator.classes_[votes.argmax(axis=1)] == labels))
    return curve


def mlflow_model_dir(estimator: Any, root: Path, features: list[str] | None = None, text: str | None = None) -> Path:
    """The model as an MLflow Model folder (MLmodel + model.pkl), loadable by `mlflow.pyfunc.load_model`
    and by the portal's model server. MLmodel is written as JSON, which is valid YAML. With `features` (the training
    columns), MLmodel has a column signature: the model server then names them in its metadata, and the app store's
    "Try it" form asks for each by name. With `text` (a text model: one string per row, e.g. a TF-IDF pipeline),
    MLmodel has a tensor signature of strings under that name: the model server takes BYTES rows for it, and "Try
    it" shows a text box."""
    import pickle

    import sklearn

    folder = root / "model"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "model.pkl").open("wb") as fh:
        pickle.dump(estimator, fh, protocol=pickle.DEFAULT_PROTOCOL)
    flavors = {
        "python_function": {"loader_module": "mlflow.sklearn", "model_path": "model.pkl", "predict_fn": "predict"},
        "sklearn": {
            "pickled_model": "model.pkl",
            "serialization_format": "pickle",
            "sklearn_version": sklearn.__version__,
            "code": None,
        },
    }
    fields: dict[str, Any] = {}
    if features:
        columns = [{"type": "double", "name": name, "required": True} for name in features]
        fields["signature"] = {"inputs": json.dumps(columns), "outputs": None}
    if text:
        tensor = {"type": "tensor", "name": text, "tensor-spec": {"dtype": "str", "shape": [-1]}}
        fields["signature"] = {"inputs": json.dumps([tensor]), "outputs": None}
    write_mlmodel(folder, flavors, f"scikit-learn=={sklearn.__version__}\n", **fields)
    return folder


def track(
    estimator: Any,
    model: str,
    params: dict[str, Any],
    train_accuracy: float,
    x: Any,
    y: list[Any],
    features: list[str] | None = None,
) -> None:
    """Record the training in the tracking API when MLFLOW_TRACKING_URI is set (the portal sets it): params,
    train_accuracy (over a forest's trees: `accuracy_curve`; else one value) and the model as an MLflow Model;
    writes tracking.json for the next nodes (evaluate, register). A tracking failure is a warning, not a failed
    training."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        log("tracking skipped: MLFLOW_TRACKING_URI is not set")
        return
    curve = accuracy_curve(estimator, x, y)
    from apps.jobs.builtin_tasks._tracking import Tracking, TrackingError, tracked_model

    out = output_dir()
    run_name = "-".join(filter(None, [os.environ.get("PORTAL_PIPELINE"), os.environ.get("PORTAL_RUN_ID"),
                                      os.environ.get("PORTAL_TASK")])) or None  # fmt: skip
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
    try:
        tracking = Tracking()
        info = tracking.start_run(experiment, run_name, {"portal.task": os.environ.get("PORTAL_TASK", "")})
        tracking.log_batch(
            info["run_id"],
            params={"model": model, **params, "train_rows": len(y)},
            metrics={} if curve else {"train_accuracy": train_accuracy},
            history={"train_accuracy": curve} if curve else None,
        )
        tracking.upload(info["artifact_uri"], mlflow_model_dir(estimator, out / "mlflow", features), "model")
        tracking.end_run(info["run_id"])
    except TrackingError as exc:
        log(f"warning: tracking failed: {exc}")
        return
    write_json(out / "tracking.json", tracked_model(info, experiment))
    log(f"tracked as run {info['run_id']} in experiment {experiment!r} (params, train_accuracy, model)")


if __name__ == "__main__":
    raise SystemExit(main())
