"""Studies driven to the end the way the beat and the workers do, on a real local agent."""

from __future__ import annotations

import time

import pytest

from apps.hpo import driver
from apps.hpo.models import Study
from apps.jobs import orchestrator
from tests.jobs.conftest import AgentProcess, agent, owner, project  # noqa: F401 (fixtures, for the tests here)

# A trial: scikit-learn's logistic regression on iris with the trial's C, a few more solver iterations per step, the
# held-out accuracy logged at every step through the portal's MLflow API (the task's injected token), a pause
# between steps so that the pruner sees the curve while the run is still going; the model is logged at the end.
TRAIN_CODE = """
import os, time, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from apps.jobs.builtin_tasks._tracking import Tracking
from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

C = ${trial.C}
x, y = load_iris(return_X_y=True)
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.4, random_state=0, stratify=y)
tracking = Tracking()
run = tracking.start_run(os.environ["MLFLOW_EXPERIMENT_NAME"], None, {})
for step in range(1, STEPS + 1):
    model = LogisticRegression(C=C, max_iter=5 * step).fit(x_train, y_train)
    accuracy = model.score(x_test, y_test)
    tracking.log_batch(run["run_id"], history={"val_accuracy": {step: accuracy}})
    print(f"step {step}: C={C} accuracy={accuracy:.3f}", flush=True)
    time.sleep(PAUSE)
tracking.upload(run["artifact_uri"], mlflow_model_dir(model, Path(os.environ["PORTAL_OUTPUT_DIR"])), "model")
tracking.end_run(run["run_id"])
"""


def train_code(steps: int = 4, pause: float = 0.7) -> str:
    return TRAIN_CODE.replace("STEPS", str(steps)).replace("PAUSE", str(pause))


@pytest.fixture
def api_agent(live_asgi, tmp_path, settings):
    """An agent that gives tasks the live API's address (their tracking goes there)."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url
    process = AgentProcess(tmp_path, env={"SITE_URL": live_asgi.url})
    process.start()
    yield process
    process.stop()


def drive_study(study: Study, timeout: float = 240, until=None) -> Study:
    """Advance the study's runs and the study itself, as the workers and the beat do, until it ends."""
    deadline = time.monotonic() + timeout
    while True:
        for run_id in study.trials.filter(run__isnull=False).values_list("run_id", flat=True):
            orchestrator.advance_run(run_id)
        driver.advance_study(study.pk)
        study.refresh_from_db()
        if until(study) if until else study.is_finished:
            return study
        statuses = list(study.trials.values_list("number", "status", "run__status", "reason"))
        assert time.monotonic() < deadline, f"study still {study.status} after {timeout} s: {statuses}"
        time.sleep(0.2)
