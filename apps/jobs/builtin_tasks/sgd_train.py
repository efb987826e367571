"""Train a linear classifier by stochastic gradient descent, one epoch at a time, on the upstream train.csv; after
every epoch, score it on the held-out test.csv and log val_accuracy (and train_accuracy) at that step to MLflow, so a
study's pruner can stop a poor trial while it trains. Saves model.joblib (scaler + classifier) and params.json."""

from __future__ import annotations

import argparse
import os
import time
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

LOSSES = ("hinge", "log_loss", "modified_huber", "perceptron")
SCHEDULES = ("constant", "optimal", "invscaling", "adaptive")
METRIC = "val_accuracy"


def build_parser() -> argparse.ArgumentParser:
    p = parser("sgd_train", __doc__)
    p.add_argument(*flag("input"), default="", help="train.csv or a directory holding it (default: upstream)")
    p.add_argument(*flag("validation"), default="", help="test.csv or a directory holding it (default: upstream)")
    p.add_argument(*flag("label_column"), default="species", help="the class column")
    p.add_argument(*flag("loss"), choices=LOSSES, default="log_loss", help="the loss SGD minimises")
    p.add_argument(*flag("alpha"), type=float, default=1e-4, help="L2 regularisation strength")
    p.add_argument(*flag("learning_rate"), choices=SCHEDULES, default="optimal", help="the step size schedule")
    p.add_argument(*flag("eta0"), type=float, default=0.01, help="initial step size (not used by 'optimal')")
    p.add_argument(*flag("epochs"), type=int, default=20, help="passes over the training rows")
    p.add_argument(
        *flag("epoch_pause"), type=float, default=0.0, help="seconds to wait after each epoch (lets a pruner watch)"
    )
    p.add_argument(*flag("seed"), type=int, default=42, help="random seed (shuffling, initialisation)")
    return p


def hyperparameters(args: argparse.Namespace) -> dict[str, Any]:
    if args.alpha <= 0:
        raise TaskError("--alpha must be greater than 0")
    if args.eta0 <= 0:
        raise TaskError("--eta0 must be greater than 0")
    if not 1 <= args.epochs <= 1000:
        raise TaskError("--epochs must be between 1 and 1000")
    if not 0 <= args.epoch_pause <= 60:
        raise TaskError("--epoch_pause must be between 0 and 60 seconds")
    return {
        "loss": args.loss, "alpha": args.alpha, "learning_rate": args.learning_rate, "eta0": args.eta0,
        "random_state": args.seed,
    }  # fmt: skip


class EpochLog:
    """The training's tracking run when MLFLOW_TRACKING_URI is set: made before the first epoch, each epoch's
    metrics logged at their step as they come. A tracking failure is a warning and stops tracking, not training."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.tracking = None
        self.info: dict[str, Any] = {}
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            log("tracking skipped: MLFLOW_TRACKING_URI is not set")
            return
        from apps.jobs.builtin_tasks._tracking import Tracking, TrackingError

        self.error = TrackingError
        run_name = "-".join(filter(None, [os.environ.get("PORTAL_PIPELINE"), os.environ.get("PORTAL_RUN_ID"),
                                          os.environ.get("PORTAL_TASK")])) or None  # fmt: skip
        self.experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
        try:
            tracking = Tracking()
            self.info = tracking.start_run(
                self.experiment, run_name, {"portal.task": os.environ.get("PORTAL_TASK", "")}
            )
            tracking.log_batch(self.info["run_id"], params=params)
        except TrackingError as exc:
            log(f"warning: tracking failed: {exc}")
            return
        self.tracking = tracking

    def epoch(self, step: int, metrics: dict[str, float]) -> None:
        if self.tracking is None:
            return
        try:
            self.tracking.log_batch(self.info["run_id"], history={k: {step: v} for k, v in metrics.items()})
        except self.error as exc:
            log(f"warning: tracking failed: {exc}")
            self.tracking = None

    def finish(self, model: Any, features: list[str]) -> None:
        if self.tracking is None:
            return
        from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

        out = output_dir()
        run_id = self.info["run_id"]
        try:
            self.tracking.upload(self.info["artifact_uri"], mlflow_model_dir(model, out / "mlflow", features), "model")
            self.tracking.end_run(run_id)
        except self.error as exc:
            log(f"warning: tracking failed: {exc}")
            return
        from apps.jobs.builtin_tasks._tracking import tracked_model

        write_json(out / "tracking.json", tracked_model(self.info, self.experiment))
        log(f"tracked as run {run_id} in experiment {self.experiment!r} (params, {METRIC} per epoch, model)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        params = hyperparameters(args)
        train_path = resolve_input(args.input, "train.csv", "input")
        valid_path = resolve_input(args.validation, "test.csv", "validation")
        header, rows = read_csv(train_path)
        features, x, y = features_and_labels(header, rows, args.label_column)
        valid_header, valid_rows = read_csv(valid_path)
        _names, x_valid, y_valid = features_and_labels(valid_header, valid_rows, args.label_column, features)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    classes = sorted(set(y))
    if len(classes) < 2:
        return fail(f"column {args.label_column!r} has a single class ({classes[0]!r}); nothing to learn")
    log(
        f"training SGD ({args.loss}) for {args.epochs} epochs on {len(rows)} rows, {len(features)} features, "
        f"{len(classes)} classes; validating on {len(valid_rows)} rows of {valid_path}"
    )

    import joblib
    import numpy as np
    from sklearn.linear_model import SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    x_train, x_check = scaler.transform(x), scaler.transform(x_valid)
    y_train, y_check = np.asarray(y), np.asarray(y_valid)
    classifier = SGDClassifier(**params)
    rng = np.random.default_rng(args.seed)
    tracked = EpochLog({**params, "epochs": args.epochs, "train_rows": len(rows)})
    curve: dict[int, float] = {}
    for step in range(1, args.epochs + 1):
        order = rng.permutation(len(y_train))
        classifier.partial_fit(x_train[order], y_train[order], classes=classes)
        train_accuracy = float(classifier.score(x_train, y_train))
        curve[step] = float(classifier.score(x_check, y_check))
        log(f"epoch {step}: train_accuracy={train_accuracy:.4f} {METRIC}={curve[step]:.4f}")
        tracked.epoch(step, {METRIC: curve[step], "train_accuracy": train_accuracy})
        if args.epoch_pause:
            time.sleep(args.epoch_pause)

    model = make_pipeline(scaler, classifier)
    out = output_dir()
    joblib.dump(model, out / "model.joblib")
    write_json(
        out / "params.json",
        {
            "model": "sgd", "hyperparameters": params, "epochs": args.epochs, "label_column": args.label_column,
            "features": features, "classes": classes, "train_rows": len(rows), "train_accuracy": train_accuracy,
            METRIC: curve[args.epochs], "curve": curve,
        },
    )  # fmt: skip
    log(f"saved {out / 'model.joblib'} and {out / 'params.json'}")
    tracked.finish(model, features)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
