"""The tracking part of `manage.py demo`: an "iris-models" experiment of five real scikit-learn runs (metric
histories over steps, params, tags, the dataset input, artifacts) and "iris-classifier@production".

Everything is computed in-process on scikit-learn's bundled iris copy (no download) and written through the
same services the MLflow API uses. Idempotent: an experiment that already has its runs is left alone, and
the production alias is only set when the model has none.
"""

from __future__ import annotations

import io
import json
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apps.datasets.models import Dataset
from apps.models import artifacts, registry, services
from apps.models.metrics import make_point
from apps.models.models import Experiment, ModelAlias, RegisteredModel, Run, now_ms
from apps.projects.models import Project

EXPERIMENT = "iris-models"
MODEL = "iris-classifier"
TEST_SIZE = 0.3
SEED = 7


def _split() -> tuple:
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    iris = load_iris()
    return train_test_split(iris.data, iris.target, test_size=TEST_SIZE, random_state=SEED, stratify=iris.target)


def _history_logistic(c: float) -> Callable:
    def train(x_train, y_train, x_test, y_test):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import log_loss

        history = []
        model = None
        for step in range(1, 41):
            model = LogisticRegression(C=c, max_iter=step, random_state=SEED)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(x_train, y_train)
            history.append(
                (step, {"accuracy": model.score(x_test, y_test), "train_accuracy": model.score(x_train, y_train),
                        "loss": log_loss(y_test, model.predict_proba(x_test), labels=[0, 1, 2])})
            )  # fmt: skip
        return model, history

    return train


def _history_forest(trees: int, depth: int) -> Callable:
    def train(x_train, y_train, x_test, y_test):
        from sklearn.ensemble import RandomForestClassifier

        model = RandomForestClassifier(n_estimators=1, max_depth=depth, warm_start=True, random_state=SEED)
        history = []
        for step in range(1, trees + 1):
            model.set_params(n_estimators=step)
            model.fit(x_train, y_train)
            history.append(
                (step, {"accuracy": model.score(x_test, y_test), "train_accuracy": model.score(x_train, y_train)})
            )
        return model, history

    return train


def _history_boosting(stages: int, rate: float) -> Callable:
    def train(x_train, y_train, x_test, y_test):
        from sklearn.ensemble import GradientBoostingClassifier

        model = GradientBoostingClassifier(n_estimators=stages, learning_rate=rate, max_depth=2, random_state=SEED)
        model.fit(x_train, y_train)
        history = []
        for step, (test_pred, train_pred) in enumerate(
            zip(model.staged_predict(x_test), model.staged_predict(x_train), strict=True), start=1
        ):
            history.append(
                (step, {"accuracy": float((test_pred == y_test).mean()),
                        "train_accuracy": float((train_pred == y_train).mean()),
                        "loss": float(model.train_score_[step - 1])})
            )  # fmt: skip
        return model, history

    return train


def _history_mlp(hidden: int, epochs: int) -> Callable:
    def train(x_train, y_train, x_test, y_test):
        from sklearn.neural_network import MLPClassifier

        model = MLPClassifier(hidden_layer_sizes=(hidden,), learning_rate_init=0.01, random_state=SEED)
        history = []
        for step in range(1, epochs + 1):
            model.partial_fit(x_train, y_train, classes=[0, 1, 2])
            history.append(
                (step, {"accuracy": model.score(x_test, y_test), "train_accuracy": model.score(x_train, y_train),
                        "loss": float(model.loss_)})
            )  # fmt: skip
        return model, history

    return train


# (run name, params, trainer)
RUNS: list[tuple[str, dict[str, str], Callable]] = [
    ("logreg-C1", {"model": "logistic_regression", "C": "1.0", "max_iter": "40"}, _history_logistic(1.0)),
    ("logreg-C0.05", {"model": "logistic_regression", "C": "0.05", "max_iter": "40"}, _history_logistic(0.05)),
    ("forest-60x3", {"model": "random_forest", "n_estimators": "60", "max_depth": "3"}, _history_forest(60, 3)),
    ("boosting-80", {"model": "gradient_boosting", "n_estimators": "80", "learning_rate": "0.1", "max_depth": "2"},
     _history_boosting(80, 0.1)),
    ("mlp-16", {"model": "mlp", "hidden_units": "16", "epochs": "150", "learning_rate_init": "0.01"},
     _history_mlp(16, 150)),
]  # fmt: skip


def _save(base: str, path: str, content: bytes) -> None:
    artifacts.save(f"{base}/{path}", io.BytesIO(content))


def _confusion_png(matrix: Any, names: list[str]) -> bytes | None:
    """A small confusion-matrix picture (Pillow is there for dataset thumbnails); None without Pillow."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:  # pragma: no cover
        return None
    cell, margin = 60, 90
    size = margin + cell * len(names)
    image = Image.new("RGB", (size + 10, size + 10), "white")
    draw = ImageDraw.Draw(image)
    peak = max(int(matrix.max()), 1)
    for i, row in enumerate(matrix):
        draw.text((4, margin + i * cell + cell // 2 - 5), names[i][:12], fill="black")
        for j, value in enumerate(row):
            shade = 255 - int(200 * value / peak)
            box = (margin + j * cell, margin + i * cell, margin + (j + 1) * cell, margin + (i + 1) * cell)
            draw.rectangle(box, fill=(shade, shade, 255), outline="grey")
            ink = "white" if shade < 140 else "black"
            draw.text((box[0] + cell // 2 - 6, box[1] + cell // 2 - 5), str(int(value)), fill=ink)
    for j, name in enumerate(names):
        draw.text((margin + j * cell + 4, margin - 16), name[:9], fill="black")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _write_artifacts(run: Run, model: Any, x_test, y_test) -> None:
    from sklearn.datasets import load_iris
    from sklearn.metrics import classification_report, confusion_matrix

    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir  # scikit-learn, loaded for the demo only

    names = [str(n) for n in load_iris().target_names]
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    predicted = model.predict(x_test)
    matrix = confusion_matrix(y_test, predicted)
    report = classification_report(y_test, predicted, target_names=names, output_dict=True)
    _save(base, "classification_report.json", json.dumps(report, indent=2).encode())
    rows = ["true,predicted"] + [f"{names[t]},{names[p]}" for t, p in zip(y_test, predicted, strict=True)]
    _save(base, "predictions.csv", ("\n".join(rows) + "\n").encode())
    picture = _confusion_png(matrix, names)
    if picture:
        _save(base, "confusion_matrix.png", picture)
    with tempfile.TemporaryDirectory() as tmp:
        folder = mlflow_model_dir(model, Path(tmp))
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                _save(base, f"model/{path.relative_to(folder).as_posix()}", path.read_bytes())


def _dataset_input(project: Project) -> list[dict]:
    dataset = Dataset.objects.filter(project=project, name="iris").first()
    version = dataset.versions.order_by("-number").first() if dataset else None
    digest = (version.digest if version else "sklearn")[:12]
    source = f"{dataset.name}@{version.number}" if version else "sklearn.datasets.load_iris"
    return [{"dataset": {"name": "iris", "digest": digest, "source_type": "portal", "source": source},
             "tags": [{"key": "mlflow.data.context", "value": "training"}]}]  # fmt: skip


def _tracked_runs(project: Project, user: Any) -> list[Run]:
    """The experiment's runs, made once (a half-made experiment is completed, not duplicated)."""
    from sklearn.metrics import f1_score, precision_score, recall_score

    experiment = Experiment.objects.filter(project=project, name=EXPERIMENT).first() or services.create_experiment(
        project, EXPERIMENT, tags=[("mlflow.note.content", "Iris classifiers compared (made by `manage.py demo`).")]
    )
    done = {r.name: r for r in Run.objects.filter(experiment=experiment, status="FINISHED")}
    x_train, x_test, y_train, y_test = _split()
    start = now_ms() - len(RUNS) * 60_000
    for index, (name, params, trainer) in enumerate(RUNS):
        if name in done:
            continue
        Run.objects.filter(experiment=experiment, name=name).delete()  # an interrupted earlier attempt
        run_start = start + index * 60_000
        run = services.create_run(
            experiment, user=user, run_name=name, start_time=run_start,
            tags=[("mlflow.source.name", "apps/models/demo.py"), ("mlflow.source.type", "LOCAL"), ("demo", "iris")],
        )  # fmt: skip
        model, history = trainer(x_train, y_train, x_test, y_test)
        points = [
            make_point(key, float(value), run_start + step * 100, step)
            for step, values in history
            for key, value in values.items()
        ]
        predicted = model.predict(x_test)
        final = {
            "f1_macro": f1_score(y_test, predicted, average="macro"),
            "precision_macro": precision_score(y_test, predicted, average="macro", zero_division=0),
            "recall_macro": recall_score(y_test, predicted, average="macro"),
        }
        last_step = history[-1][0]
        points += [make_point(k, float(v), run_start + last_step * 100, last_step) for k, v in final.items()]
        all_params = {**params, "test_size": str(TEST_SIZE), "seed": str(SEED)}
        for offset in range(0, len(points), 1000):  # log-batch's limit per call
            services.log_batch(
                run, metrics=points[offset : offset + 1000], params=list(all_params.items()) if offset == 0 else []
            )
        services.log_inputs(run, _dataset_input(project))
        _write_artifacts(run, model, x_test, y_test)
        services.update_run(run, status="FINISHED", end_time=run_start + 30_000 + index * 1_000)
        done[name] = run
    return [done[name] for name, _p, _t in RUNS]


def _best(runs: list[Run]) -> Run:
    from apps.models.models import LatestMetric

    scores = dict(LatestMetric.objects.filter(run__in=runs, key="accuracy").values_list("run_id", "value"))
    # ties go to the simpler, earlier run
    return max(runs, key=lambda r: (scores.get(r.pk, 0.0), -runs.index(r)))


def populate(project: Project, user: Any) -> RegisteredModel:
    """Idempotently: the "iris-models" experiment and a version of "iris-classifier" aliased "production"."""
    runs = _tracked_runs(project, user)
    model = RegisteredModel.objects.filter(project=project, name=MODEL).first() or registry.create_registered_model(
        project, MODEL, description="Classifies iris flowers by their sepal and petal measurements."
    )
    if not ModelAlias.objects.filter(registered_model=model, alias="production").exists():
        best = _best(runs)
        version = model.versions.filter(run=best).order_by("-version").first() or registry.create_model_version(
            model, source=f"runs:/{best.run_uuid}/model", run=best, user_id=getattr(user, "username", ""),
            description=f"Best run of the {EXPERIMENT} experiment ({best.name}).",
        )  # fmt: skip
        card = CARD.format(name=MODEL, version=version.version, run=best.name, experiment=EXPERIMENT)
        registry.update_model_version(version, model_card=card)
        registry.set_alias(model, "production", version.version)
    return model


CARD = """# {name} v{version}

## Intended use

Demonstration: classify iris flowers (setosa, versicolor, virginica) from four measurements in centimetres.
Not for anything that matters.

## Metrics

Held-out accuracy and macro F1 on 30 % of the 150 rows (stratified, seed 7); see run **{run}** in the
`{experiment}` experiment for the curves.

## Data

Fisher's iris data as bundled with scikit-learn (the project's `iris` dataset).

## Limitations

150 rows from one collection; measurements outside the training ranges are extrapolation.
"""
