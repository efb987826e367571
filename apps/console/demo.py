"""`manage.py demo` in order: each app makes its own part (`apps/<app>/demo.py`); this module orders them, as each
part builds on the ones before it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apps.alerts import demo as alerts_demo
from apps.datasets import demo as datasets_demo
from apps.hpo import demo as hpo_demo
from apps.jobs import demo as jobs_demo
from apps.jobs.models import Pipeline
from apps.knowledge import demo as knowledge_demo
from apps.models import demo as models_demo
from apps.monitoring import demo as monitoring_demo
from apps.projects.models import Project
from apps.retraining import demo as retraining_demo
from apps.serving import demo as serving_demo
from apps.serving.models import InferenceService


def examples() -> list[tuple[str, Callable[[Project, Any], Any]]]:
    """The demo's examples in the order they build on each other, each idempotent and made on its own: `manage.py
    demo` makes each in a savepoint, so one that fails leaves nothing half-made and does not stop the others."""
    return [
        ("built-in templates", jobs_demo.builtin_templates),
        ("iris dataset", datasets_demo.populate),
        ("tracking (iris-models, iris-classifier)", models_demo.populate),
        ("portal-docs knowledge base", knowledge_demo.populate),
        ("iris service", serving_demo.populate),  # follows the alias the pipeline's last step sets
        ("iris pipeline", jobs_demo.iris_pipeline),
        ("iris-automl pipeline", jobs_demo.automl_pipeline),  # AutoML → explain → ONNX INT8 → serve (iris-onnx)
        ("memory-hog pipeline", jobs_demo.memory_hog_pipeline),  # fails on purpose: a diagnosed failure
        ("iris-sgd study", hpo_demo.populate),  # its trials read the iris dataset with the built-in templates
        ("iris-run-failed alert", alerts_demo.populate),  # names the iris pipeline
        ("iris drift monitor", _drift_monitor),  # its reference: what the pipeline's training step read
        ("iris retrain policy", retraining_demo.populate),  # after the pipeline, the drift monitor and the alerts
    ]


def _drift_monitor(project: Project, user: Any) -> Any:
    service = InferenceService.objects.filter(project=project, name=serving_demo.SERVICE).first()
    return monitoring_demo.populate(project, user, service)


def populate(project: Project, user: Any) -> Pipeline:
    """Idempotently: every example in `project`, ending with the iris pipeline, which it returns."""
    made = None
    for name, make in examples():
        result = make(project, user)
        if name == "iris pipeline":
            made = result
    return made
