"""The studies part of `manage.py demo` (apps/console/demo.py orders the parts): "iris-sgd", a study tuning an
iris classifier. Each trial is a pipeline run reading the demo's iris dataset: load → split → sgd-train, the built-in
that logs the held-out accuracy after every epoch, so the median pruner stops poor trials while they train."""

from __future__ import annotations

from typing import Any

from apps.hpo import services
from apps.hpo.models import Study
from apps.projects.models import Project

NAME = "iris-sgd"

DOCUMENT: dict[str, Any] = {
    "name": NAME,
    "description": "Tune an SGD classifier of iris flowers: loss, regularisation and step size schedule.",
    "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
    "space": {
        "loss": {"type": "categorical", "choices": ["hinge", "log_loss", "modified_huber", "perceptron"]},
        "alpha": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
        "learning_rate": {"type": "categorical", "choices": ["optimal", "constant", "invscaling", "adaptive"]},
        "eta0": {
            "type": "float",
            "low": 1e-4,
            "high": 1.0,
            "log": True,
            "condition": {"param": "learning_rate", "in": ["constant", "invscaling", "adaptive"]},
        },
    },
    "algorithm": "tpe",
    "early_stopping": {"algorithm": "median", "n_startup_trials": 4, "n_warmup_steps": 2},
    "budget": {"max_trials": 20, "parallel_trials": 2, "max_failed_trials": 3},
    "seed": 7,
    "trial_template": {
        "spec": {
            "failure_policy": "fail_fast",
            "nodes": [
                {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@latest"}},
                {
                    "name": "split",
                    "template": "data-split",
                    "depends_on": ["load"],
                    "args": {"test_size": 0.3, "seed": 7, "label_column": "species"},
                },
                {
                    "name": "train",
                    "template": "sgd-train",
                    "depends_on": ["split"],
                    "args": {
                        "label_column": "species",
                        "loss": "${trial.loss}",
                        "alpha": "${trial.alpha}",
                        "learning_rate": "${trial.learning_rate}",
                        "eta0": "${trial.eta0}",
                        # 15 epochs over ~5 s: the driver's passes (every PORTAL_HPO_INTERVAL s) see the curve.
                        "epochs": 15,
                        "epoch_pause": 0.35,
                        "seed": "${trial.number}",
                    },
                },
            ],
        },
    },
}


def populate(project: Project, user: Any) -> Study:
    """Idempotently: the "iris-sgd" study (made once; it starts running when made, the beat drives it)."""
    existing = Study.objects.filter(project=project, name=NAME).first()
    if existing is not None:
        return existing
    return services.create_study(project, user, DOCUMENT)
