"""Evaluate a trained model.joblib on test.csv and write metrics.json (accuracy, macro F1, per-class counts)."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
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


def build_parser() -> argparse.ArgumentParser:
    p = parser("evaluate", __doc__)
    p.add_argument(*flag("model"), default="", help="model.joblib or its directory (default: upstream)")
    p.add_argument(*flag("test"), default="", help="test.csv or its directory (default: upstream)")
    p.add_argument(
        *flag("label_column"), default="", help="the class column (default: from params.json beside the model)"
    )
    p.add_argument(
        *flag("min_accuracy"), type=float, default=0.0, help="fail the task below this accuracy (0: never fail)"
    )
    return p


def training_record(model_path: Path) -> dict[str, Any]:
    """params.json written by sklearn_train beside the model, or {} when there is none."""
    path = model_path.with_name("params.json")
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskError(f"{path}: unreadable: {exc}") from None
    return record if isinstance(record, dict) else {}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.min_accuracy <= 1:
        return fail(f"--min_accuracy must be between 0 and 1, got {args.min_accuracy:g}")
    try:
        model_path = resolve_input(args.model, "model.joblib", "model")
        test_path = resolve_input(args.test, "test.csv", "test")
        record = training_record(model_path)
        label_column = args.label_column.strip() or record.get("label_column") or "species"
        header, rows = read_csv(test_path)
        _names, x, y_true = features_and_labels(header, rows, label_column, record.get("features"))
    except TaskError as exc:
        return fail(str(exc), exc.code)

    import joblib

    try:
        model = joblib.load(model_path)
    except Exception as exc:  # a truncated file, a pickle from an incompatible version, …
        return fail(f"cannot load {model_path}: {type(exc).__name__}: {exc}", 1)
    log(f"evaluating {model_path} on {len(rows)} rows of {test_path}")
    try:
        y_pred = [str(label) for label in model.predict(x)]
    except Exception as exc:  # wrong feature count, not an estimator
        return fail(f"the model cannot predict on {test_path}: {type(exc).__name__}: {exc}", 1)

    metrics = compute_metrics(y_true, y_pred)
    write_json(output_dir() / "metrics.json", metrics)
    track(model_path, metrics)
    log(f"accuracy: {metrics['accuracy']:.4f}")
    log(f"f1_macro: {metrics['f1_macro']:.4f}")
    for label, counts in metrics["per_class"].items():
        log(f"  {label}: support={counts['support']} predicted={counts['predicted']} correct={counts['correct']}")
    if metrics["accuracy"] < args.min_accuracy:
        return fail(f"accuracy {metrics['accuracy']:.4f} is below --min_accuracy {args.min_accuracy:g}", 1)
    return 0


def track(model_path: Path, metrics: dict[str, Any]) -> None:
    """Log the test metrics to the tracking run that trained the model (its tracking.json beside the model), so
    they sit next to its params and train accuracy (and in a registered version's card), not only in the log.
    Without a tracking URI or a tracked training there is nothing to log to; a tracking failure is a warning."""
    record_path = model_path.with_name("tracking.json")
    if not os.environ.get("MLFLOW_TRACKING_URI") or not record_path.is_file():
        log("tracking skipped: no tracked training run upstream" if os.environ.get("MLFLOW_TRACKING_URI")
            else "tracking skipped: MLFLOW_TRACKING_URI is not set")  # fmt: skip
        return
    from apps.jobs.builtin_tasks._tracking import Tracking, TrackingError

    try:
        run_id = json.loads(record_path.read_text(encoding="utf-8"))["run_id"]
        Tracking().log_batch(
            run_id,
            params={"test_rows": metrics["rows"]},
            metrics={"test_accuracy": metrics["accuracy"], "test_f1_macro": metrics["f1_macro"]},
        )
    except (OSError, ValueError, KeyError, TrackingError) as exc:
        log(f"warning: tracking failed: {exc}")
        return
    log(f"logged test_accuracy and test_f1_macro to run {run_id}")


def compute_metrics(y_true: list[str], y_pred: list[str]) -> dict[str, Any]:
    from sklearn.metrics import accuracy_score, f1_score

    support, predicted = Counter(y_true), Counter(y_pred)
    correct = Counter(t for t, p in zip(y_true, y_pred, strict=True) if t == p)
    labels = sorted(set(y_true) | set(y_pred))
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "f1_macro": float(f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "rows": len(y_true),
        "per_class": {
            label: {"support": support[label], "predicted": predicted[label], "correct": correct[label]}
            for label in labels
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
