"""Studies made through the service, with a trial template on the `py` test template."""

from __future__ import annotations

from typing import Any

from apps.hpo import services
from tests.factories import python_template


def study_document(**overrides: Any) -> dict[str, Any]:
    python_template()
    doc: dict[str, Any] = {
        "name": "tune",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "space": {
            "C": {"type": "float", "low": 1e-3, "high": 10.0, "log": True},
            "solver": {"type": "categorical", "choices": ["lbfgs", "saga"]},
            "l1_ratio": {"type": "float", "low": 0.0, "high": 1.0, "condition": {"param": "solver", "in": ["saga"]}},
        },
        "algorithm": "tpe",
        "budget": {"max_trials": 4, "parallel_trials": 2},
        "seed": 1,
        "trial_template": {
            "job_template": "py",
            "args": {"code": "print(${trial.C}, '${trial.solver}', '${trial.l1_ratio}')"},
        },
    }
    doc.update(overrides)
    return doc


def study(project, owner, **overrides: Any):
    return services.create_study(project, owner, study_document(**overrides))
