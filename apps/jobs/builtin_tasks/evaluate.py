"""Evaluate a trained model.joblib on test.csv and write metrics.json (accuracy, macro F1, per-class counts).

With --champion (a registered version, models:/name@alias, or a model file), the champion is scored on the same
test rows too, and logged beside the new model's metrics as champion_test_accuracy and champion_test_f1_macro: the
retraining gate's same-split comparison (docs/retraining.md). The champion is loaded here, inside the task's
sandbox, never in the portal."""

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

# The champion's metrics on the new model's test rows are logged as champion_<metric> (apps/retraining/gate.py reads
# them under that name).
CHAMPION_PREFIX = "champion_"


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
    p.add_argument(
        *flag("champion"),
        default="",
        help="also score this model on the same rows: models:/name@alias, models:/name/3, a model file or its "
        "folder (default: none)",
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
    champion = score_champion(args.champion.strip(), header, rows, label_column) if args.champion.strip() else None
    if champion is not None:
        metrics["champion"] = champion
    write_json(output_dir() / "metrics.json", metrics)
    track(model_path, metrics)
    log(f"accuracy: {metrics['accuracy']:.4f}")
    log(f"f1_macro: {metrics['f1_macro']:.4f}")
    for label, counts in metrics["per_class"].items():
        log(f"  {label}: support={counts['support']} predicted={counts['predicted']} correct={counts['correct']}")
    if champion is not None:
        log(f"champion {champion['model']}: accuracy {champion['accuracy']:.4f}, f1_macro {champion['f1_macro']:.4f}")
    if metrics["accuracy"] < args.min_accuracy:
        return fail(f"accuracy {metrics['accuracy']:.4f} is below --min_accuracy {args.min_accuracy:g}", 1)
    return 0


# --- the champion ----------------------------------------------------------------------------------------------------


def score_champion(
    reference: str, header: list[str], rows: list[list[str]], label_column: str
) -> dict[str, Any] | None:
    """The champion's metrics on the same rows ({model, version, accuracy, f1_macro, rows, per_class}), or None with a
    warning when it cannot be fetched, loaded or asked to predict: the gate then falls back to the champion's own
    evaluation, and says so, rather than failing the retraining (a champion trained on columns the new data lacks is
    a reason to compare on separate splits, not to stop)."""
    try:
        estimator, label, version, features = load_champion(reference)
        _names, x, y_true = features_and_labels(header, rows, label_column, features)
        y_pred = [str(value) for value in estimator.predict(x)]
    except Exception as exc:  # a missing alias, an unreadable pickle, other columns: all mean "not scored"
        log(f"warning: the champion {reference} was not scored: {type(exc).__name__}: {exc}")
        return None
    return {"model": label, "version": version, **compute_metrics(y_true, y_pred)}


def load_champion(reference: str) -> tuple[Any, str, int | None, list[str] | None]:
    """(estimator, what to call it, its registered version number or None, its feature columns or None) of a
    registered version (models:/…, downloaded through the tracking API into the output folder) or a local model."""
    version: int | None = None
    if reference.startswith("models:/"):
        from apps.jobs.builtin_tasks._tracking import Tracking

        tracking = Tracking()
        record = tracking.model_version(reference[len("models:/") :])
        version = int(record["version"])
        label = f"{record.get('name') or reference[len('models:/') :].split('@')[0]} version {version}"
        target = output_dir() / "champion"
        log(f"downloading the champion {label} ({reference}) from the registry")
        tracking.download(record["source"], target)
        path = model_file(target)
    else:
        path = model_file(Path(reference))
        label = str(path)
    return load_model(path), label, version, model_features(path)


def model_file(path: Path) -> Path:
    """The pickled estimator: the file itself, or inside a folder model.joblib, an MLflow Model's model.pkl, or the
    same one folder down (an MLflow Model logged under `model/`)."""
    if path.is_file():
        return path
    for candidate in ("model.joblib", "model.pkl", "model/model.pkl"):
        if (path / candidate).is_file():
            return path / candidate
    raise TaskError(f"--champion: no model.joblib or MLflow model.pkl in {path}")


def model_features(path: Path) -> list[str] | None:
    """The training columns, in order: params.json beside a model.joblib (sklearn_train's record), or the column
    signature of an MLflow Model's MLmodel (written as JSON by sklearn_train). None: the test file's own columns."""
    record = training_record(path)
    if isinstance(record.get("features"), list):
        return [str(name) for name in record["features"]]
    mlmodel = path.with_name("MLmodel")
    if not mlmodel.is_file():
        return None
    try:
        inputs = json.loads(json.loads(mlmodel.read_text(encoding="utf-8"))["signature"]["inputs"])
        return [str(column["name"]) for column in inputs]
    except (ValueError, KeyError, TypeError):  # YAML, no signature, a tensor signature: go by the test columns
        return None


def load_model(path: Path) -> Any:
    if path.suffix == ".pkl":
        import pickle

        with path.open("rb") as fh:
            return pickle.load(fh)  # in the task's sandbox: a model of the task's own project
    import joblib

    return joblib.load(path)


# --- tracking --------------------------------------------------------------------------------------------------------


def track(model_path: Path, metrics: dict[str, Any]) -> None:
    """Log the test metrics to the tracking run that trained the model (its tracking.json beside the model), so
    they sit next to its params and train accuracy (and in a registered version's card), not only in the log.
    With a scored champion, its metrics on the same rows go beside them (champion_test_accuracy, …, and the
    registered version scored as champion_version), which is what the retraining gate compares.
    Without a tracking URI or a tracked training there is nothing to log to; a tracking failure is a warning."""
    record_path = model_path.with_name("tracking.json")
    if not os.environ.get("MLFLOW_TRACKING_URI") or not record_path.is_file():
        log("tracking skipped: no tracked training run upstream" if os.environ.get("MLFLOW_TRACKING_URI")
            else "tracking skipped: MLFLOW_TRACKING_URI is not set")  # fmt: skip
        return
    from apps.jobs.builtin_tasks._tracking import Tracking, TrackingError

    logged = {"test_accuracy": metrics["accuracy"], "test_f1_macro": metrics["f1_macro"]}
    champion = metrics.get("champion")
    if champion is not None:
        logged |= {f"{CHAMPION_PREFIX}test_accuracy": champion["accuracy"],
                   f"{CHAMPION_PREFIX}test_f1_macro": champion["f1_macro"]}  # fmt: skip
        if champion.get("version") is not None:
            logged[f"{CHAMPION_PREFIX}version"] = champion["version"]
    try:
        run_id = json.loads(record_path.read_text(encoding="utf-8"))["run_id"]
        Tracking().log_batch(run_id, params={"test_rows": metrics["rows"]}, metrics=logged)
    except (OSError, ValueError, KeyError, TrackingError) as exc:
        log(f"warning: tracking failed: {exc}")
        return
    names = sorted(logged)
    log(f"logged {', '.join(names[:-1])} and {names[-1]} to run {run_id}")


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
