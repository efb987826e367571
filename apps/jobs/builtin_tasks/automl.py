"""AutoML for tabular classification: search scikit-learn estimators and their hyperparameters with Optuna (TPE) for
--time_budget seconds, scoring each trial by --metric over --folds cross-validation folds of the training rows.
Each estimator is first tried once with its defaults, so the leaderboard compares every family.

The best trial's estimator is refitted on all training rows and scored on the held-out rows. Writes leaderboard.json
(every trial: rank, estimator, params, cross-validated metric, seconds; MLflow's table format), model.joblib and
params.json (as sklearn-train, so evaluate can follow), and with MLFLOW_TRACKING_URI logs the leaderboard, the
metrics and the model (an MLflow sklearn folder) to a new run and registers it as a new version; registered.json
then names it for explain and onnx-optimise downstream.

Rows: a dataset version's CSV split as data-split splits it (--dataset), else the upstream train.csv and test.csv.
docs/automl.md."""

from __future__ import annotations

import argparse
import json
import os
import time
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

ESTIMATORS = ("logistic_regression", "knn", "random_forest", "extra_trees", "hist_gradient_boosting")  # cheap first
METRICS = {  # --metric: scikit-learn's scorer name
    "accuracy": "accuracy",
    "balanced_accuracy": "balanced_accuracy",
    "f1_macro": "f1_macro",
    "f1_weighted": "f1_weighted",
    "roc_auc_ovr": "roc_auc_ovr",
}
LEADERBOARD = "leaderboard.json"
COLUMNS = ["rank", "trial", "estimator", "params", "cv_score", "cv_std", "seconds"]
RUN_TAG = "portal.automl"  # on the registered version: the id of the run that searched for it


def build_parser() -> argparse.ArgumentParser:
    p = parser("automl", __doc__)
    p.add_argument(*flag("dataset"), default="", help="local folder of a dataset version (default: upstream split)")
    p.add_argument(*flag("file"), default="", help="the CSV file inside the dataset version (default: its only one)")
    p.add_argument(*flag("label_column"), default="", help="the class column (required)")
    p.add_argument(*flag("time_budget"), type=float, default=60, help="seconds the search may take")
    p.add_argument(*flag("metric"), default="accuracy", help=f"what the search maximises: {', '.join(METRICS)}")
    p.add_argument(
        *flag("estimators"), default=",".join(ESTIMATORS), help=f"comma-separated, among {', '.join(ESTIMATORS)}"
    )
    p.add_argument(*flag("max_trials"), type=int, default=0, help="stop after this many trials too (0: no limit)")
    p.add_argument(*flag("folds"), type=int, default=3, help="cross-validation folds of each trial")
    p.add_argument(*flag("test_size"), type=float, default=0.2, help="--dataset: held-out fraction (as data-split)")
    p.add_argument(*flag("seed"), type=int, default=42, help="seed of the split, the sampler and the estimators")
    p.add_argument(*flag("name"), default="", help="registered model of the new version (default: the pipeline's)")
    p.add_argument(*flag("alias"), default="", help="alias to move to the new version (default: none)")
    return p


def check(args: argparse.Namespace) -> list[str]:
    """The estimators to try; a TaskError naming the first bad argument."""
    if not args.label_column.strip():
        raise TaskError("--label_column is required: the column the models learn to predict")
    if not args.time_budget > 0:
        raise TaskError(f"--time_budget must be more than 0 seconds, got {args.time_budget:g}")
    if args.metric not in METRICS:
        raise TaskError(f"--metric {args.metric!r} is unknown; use one of {', '.join(METRICS)}")
    estimators = [e.strip() for e in args.estimators.split(",") if e.strip()]
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown or not estimators:
        raise TaskError(f"--estimators {args.estimators!r}: use some of {', '.join(ESTIMATORS)}")
    if args.max_trials < 0:
        raise TaskError(f"--max_trials cannot be negative (0 means no limit), got {args.max_trials}")
    if args.folds < 2:
        raise TaskError(f"--folds must be at least 2, got {args.folds}")
    if not 0 < args.test_size < 1:
        raise TaskError(f"--test_size must be between 0 and 1 (exclusive), got {args.test_size:g}")
    return list(dict.fromkeys(estimators))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        estimators = check(args)
        label = args.label_column.strip()
        header, train, test = rows_of(args, label)
        names, x, y = features_and_labels(header, train, label)
        _names, x_test, y_test = features_and_labels(header, test, label, names)
        if len(set(y)) < 2:
            raise TaskError(f"column {label!r} has a single class in the training rows; nothing to learn")
        leaderboard, best = search(x, y, estimators, args)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    out = output_dir()
    table = {"columns": COLUMNS, "data": [[row[c] for c in COLUMNS] for row in leaderboard]}
    write_json(out / LEADERBOARD, table)
    print_leaderboard(leaderboard, args.metric)
    model, test_score = refit(best, x, y, x_test, y_test, args)
    import joblib

    joblib.dump(model, out / "model.joblib")
    record = {
        "model": best["estimator"],
        "hyperparameters": best["params"],
        "label_column": label,
        "features": names,
        "classes": sorted(set(y)),
        "train_rows": len(y),
        "test_rows": len(y_test),
        "metric": args.metric,
        "cv_score": best["cv_score"],
        f"test_{args.metric}": test_score,
        "trials": len(leaderboard),
    }
    write_json(out / "params.json", record)
    log(f"best: {best['estimator']} {json.dumps(best['params'])}, cv {args.metric} {best['cv_score']:.4f}, "
        f"test {args.metric} {test_score:.4f}")  # fmt: skip
    try:
        return track(args, leaderboard, record, model, names)
    except TaskError as exc:
        return fail(str(exc), exc.code)


def rows_of(args: argparse.Namespace, label: str) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(header, training rows, held-out rows): the dataset version's CSV split as data-split would (stratified by
    the label), or the upstream train.csv and test.csv."""
    if args.dataset.strip():
        from apps.jobs.builtin_tasks.dataset_load import pick_csv
        from apps.jobs.builtin_tasks.split import split_rows

        path = pick_csv(Path(args.dataset), args.file.strip())
        header, rows = read_csv(path)
        if label not in header:
            raise TaskError(f"label column {label!r} is not in the CSV header ({', '.join(header)})")
        train, test = split_rows(header, rows, args.test_size, args.seed, label)
        log(f"{path.name}: {len(train)} training and {len(test)} held-out rows (test_size={args.test_size:g})")
        return header, train, test
    train_path = resolve_input("", "train.csv", "--dataset (none given, and upstream train.csv)")
    test_path = resolve_input("", "test.csv", "--dataset (none given, and upstream test.csv)")
    header, train = read_csv(train_path)
    test_header, test = read_csv(test_path)
    if test_header != header:
        raise TaskError(f"{test_path} and {train_path} have different headers")
    log(f"upstream split: {len(train)} training and {len(test)} held-out rows")
    return header, train, test


# --- the search --------------------------------------------------------------------------------------------------


def suggest(trial: Any, estimator: str) -> dict[str, Any]:
    """The hyperparameters of one trial of `estimator` (its search space)."""
    if estimator == "logistic_regression":
        return {"C": trial.suggest_float("C", 1e-3, 1e3, log=True)}
    if estimator in ("random_forest", "extra_trees"):
        return {
            "n_estimators": trial.suggest_int("n_estimators", 10, 300, log=True),
            "max_depth": trial.suggest_int("max_depth", 2, 32, log=True),
            "min_samples_leaf": trial.suggest_int("min_samples_leaf", 1, 10),
            "max_features": trial.suggest_float("max_features", 0.2, 1.0),
        }
    if estimator == "hist_gradient_boosting":
        return {
            "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.5, log=True),
            "max_iter": trial.suggest_int("max_iter", 20, 300, log=True),
            "max_leaf_nodes": trial.suggest_int("max_leaf_nodes", 4, 64, log=True),
            "l2_regularization": trial.suggest_float("l2_regularization", 1e-6, 1.0, log=True),
        }
    return {
        "n_neighbors": trial.suggest_int("n_neighbors", 1, 30),
        "weights": trial.suggest_categorical("weights", ["uniform", "distance"]),
    }


def make(estimator: str, params: dict[str, Any], seed: int) -> Any:
    """A fresh scikit-learn classifier; scale-sensitive ones behind a StandardScaler (one pickled pipeline)."""
    from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if estimator == "logistic_regression":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed, **params))
    if estimator == "knn":
        return make_pipeline(StandardScaler(), KNeighborsClassifier(**params))
    kind = {
        "random_forest": RandomForestClassifier,
        "extra_trees": ExtraTreesClassifier,
        "hist_gradient_boosting": HistGradientBoostingClassifier,
    }[estimator]
    return kind(random_state=seed, **params)


def search(
    x: list[list[float]], y: list[str], estimators: list[str], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the leaderboard: every finished trial, best first, ranked; the best row). Each estimator is tried with its
    defaults first (queued trials), then Optuna's TPE sampler picks estimator and hyperparameters until the budget
    (or --max_trials) is spent. A trial that raises is kept with its error and no score."""
    import warnings

    import numpy as np
    import optuna
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning)
    features, labels = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=object)
    smallest = min(np.unique(labels, return_counts=True)[1])
    folds = min(args.folds, int(smallest))
    if folds < 2:
        raise TaskError("a class has a single training row: too few to cross-validate; give more rows")
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=args.seed)
    rows: list[dict[str, Any]] = []

    def objective(trial: Any) -> float:
        estimator = trial.suggest_categorical("estimator", estimators)
        params = {} if trial.user_attrs.get("defaults") else suggest(trial, estimator)
        started = time.monotonic()
        row = {"trial": trial.number, "estimator": estimator, "params": params, "cv_score": None, "cv_std": None}
        try:
            scores = cross_val_score(make(estimator, params, args.seed), features, labels, cv=cv,
                                     scoring=METRICS[args.metric], error_score="raise")  # fmt: skip
        except Exception as exc:  # a hyperparameter mix the estimator refuses, a metric it cannot give
            row["seconds"] = round(time.monotonic() - started, 4)
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            raise optuna.TrialPruned(row["error"]) from None
        row.update(cv_score=round(float(scores.mean()), 6), cv_std=round(float(scores.std()), 6))
        row["seconds"] = round(time.monotonic() - started, 4)
        rows.append(row)
        log(f"trial {trial.number}: {estimator} {json.dumps(params)} cv {args.metric} {row['cv_score']:.4f} "
            f"({row['seconds']:.2f} s)")  # fmt: skip
        return row["cv_score"]

    sampler = optuna.samplers.TPESampler(seed=args.seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for estimator in estimators:
        study.enqueue_trial({"estimator": estimator}, user_attrs={"defaults": True})
    log(f"searching {', '.join(estimators)} for {args.time_budget:g} s, {folds}-fold {args.metric}")
    study.optimize(objective, timeout=args.time_budget, n_trials=args.max_trials or None)
    scored = sorted((r for r in rows if r["cv_score"] is not None), key=lambda r: (-r["cv_score"], r["seconds"]))
    if not scored:
        errors = "; ".join(sorted({r.get("error", "") for r in rows}))[:300]
        raise TaskError(f"no trial finished within --time_budget {args.time_budget:g} s ({errors or 'none ran'})", 1)
    failed = [r for r in rows if r["cv_score"] is None]
    for rank, row in enumerate(scored, start=1):
        row["rank"] = rank
    for row in failed:
        row["rank"] = None
    leaderboard = [*scored, *failed]
    for row in leaderboard:
        row["params"] = json.dumps(row["params"], sort_keys=True)
    best = {**scored[0], "params": json.loads(scored[0]["params"])}
    return leaderboard, best


def refit(best: dict[str, Any], x: Any, y: Any, x_test: Any, y_test: Any, args: argparse.Namespace):
    """(the best estimator fitted on all training rows, its --metric on the held-out rows)."""
    import numpy as np
    from sklearn.metrics import get_scorer

    model = make(best["estimator"], best["params"], args.seed)
    model.fit(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=object))
    try:
        score = get_scorer(METRICS[args.metric])(
            model, np.asarray(x_test, dtype=np.float64), np.asarray(y_test, dtype=object)
        )
    except ValueError as exc:  # e.g. roc_auc_ovr on held-out rows missing a class
        log(f"warning: test {args.metric} not computed: {exc}")
        return model, float("nan")
    return model, round(float(score), 6)


def print_leaderboard(leaderboard: list[dict[str, Any]], metric: str) -> None:
    log(f"| rank | estimator | cv {metric} | ± | seconds | params |")
    log("|---|---|---|---|---|---|")
    for row in leaderboard:
        cells = [row["rank"], row["estimator"], row["cv_score"], row["cv_std"], row["seconds"], row["params"]]
        log("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |" + (
            f" {row['error']}" if row.get("error") else ""))  # fmt: skip


# --- tracking and the new version --------------------------------------------------------------------------------


def metrics_of(leaderboard: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, float]:
    """best_cv_<metric>, test_<metric>, trials, and the best cross-validated score of each estimator tried."""
    metric = record["metric"]
    metrics = {f"best_cv_{metric}": record["cv_score"], "trials": float(len(leaderboard))}
    if record[f"test_{metric}"] == record[f"test_{metric}"]:  # not NaN
        metrics[f"test_{metric}"] = record[f"test_{metric}"]
    for row in reversed(leaderboard):  # best last: it wins
        if row["cv_score"] is not None:
            metrics[f"cv_{metric}_{row['estimator']}"] = row["cv_score"]
    return metrics


def track(
    args: argparse.Namespace, leaderboard: list[dict[str, Any]], record: dict[str, Any], model: Any, names: list[str]
) -> int:
    """Log the leaderboard (artifact), the metrics (and each trial's score as a history) and the best model to a new
    tracking run, and register the model as a new version. Without MLFLOW_TRACKING_URI: the files only."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        log("tracking skipped: MLFLOW_TRACKING_URI is not set; nothing registered")
        return 0
    from apps.jobs.builtin_tasks._tracking import Tracking, tracked_model
    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    out = output_dir()
    tracking = Tracking()
    pipeline = os.environ.get("PORTAL_PIPELINE", "")
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or pipeline or "Default"
    parts = [pipeline, os.environ.get("PORTAL_RUN_ID"), os.environ.get("PORTAL_TASK")]
    tags = {
        "portal.task": os.environ.get("PORTAL_TASK", ""),
        "mlflow.loggedArtifacts": json.dumps([{"path": LEADERBOARD, "type": "table"}]),
    }
    info = tracking.start_run(experiment, "-".join(filter(None, parts)) or None, tags)
    params = {
        "best_estimator": record["model"],
        **{f"best_{key}": value for key, value in record["hyperparameters"].items()},
        "metric": record["metric"],
        "time_budget": args.time_budget,
        "estimators": args.estimators,
        "label_column": record["label_column"],
        "train_rows": record["train_rows"],
    }
    by_trial = {row["trial"]: row["cv_score"] for row in leaderboard if row["cv_score"] is not None}
    tracking.log_batch(
        info["run_id"],
        params=params,
        metrics=metrics_of(leaderboard, record),
        history={f"trial_cv_{record['metric']}": by_trial},
    )
    tracking.upload(info["artifact_uri"], out / LEADERBOARD, LEADERBOARD)
    tracking.upload(info["artifact_uri"], mlflow_model_dir(model, out / "mlflow", names), "model")
    tracking.end_run(info["run_id"])
    tracked = tracked_model(info, experiment)
    write_json(out / "tracking.json", tracked)
    log(f"logged {LEADERBOARD} ({len(leaderboard)} trials) and the best model to run {info['run_id']}")
    name = args.name.strip() or pipeline or "automl"
    metric = record["metric"]
    description = (
        f"AutoML ({len(leaderboard)} trials in {args.time_budget:g} s): {record['model']}, "
        f"cv {metric} {record['cv_score']:.4f}, test {metric} {record[f'test_{metric}']:.4f}."
    )
    version = tracking.register(
        name, tracked["model_source"], info["run_id"], description, tags={RUN_TAG: info["run_id"]}
    )
    alias = args.alias.strip().lower()
    if alias:
        tracking.set_alias(name, alias, version["version"])
    write_json(
        out / "registered.json",
        {"name": name, "version": version["version"], "alias": alias, "run_id": info["run_id"]},
    )
    log(f"registered {name} version {version['version']} ({record['model']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
