"""The jobs part of `manage.py demo` (apps/console/demo.py orders the parts): the built-in templates, the "iris"
pipeline, the "iris-automl" pipeline (AutoML → explain → ONNX INT8 → serve), the memory hog, and a headless run."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings
from django.db import close_old_connections

from apps.jobs import orchestrator
from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import Pipeline, PipelineRun
from apps.jobs.services import save_pipeline, start_run
from apps.projects.models import Project

IRIS_SPEC: dict[str, Any] = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "env": {"DEMO": "iris"},
    "nodes": [
        {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@latest"}},
        {"name": "split", "template": "data-split", "depends_on": ["load"], "args": {"test_size": 0.3, "seed": 7}},
        {
            "name": "train",
            "template": "sklearn-train",
            "depends_on": ["split"],
            "args": {"label_column": "species", "model": "logistic_regression", "max_iter": 300},
            "retries": 1,
        },
        {
            "name": "evaluate",
            "template": "evaluate",
            "depends_on": ["split", "train"],
            "args": {"label_column": "species", "min_accuracy": 0.8},
        },
        {
            "name": "register",
            "template": "model-register",
            "depends_on": ["train", "evaluate"],  # only a model that passed the evaluation
            "args": {"name": "iris-classifier", "alias": "staging"},
        },
    ],
}

AUTOML = "iris-automl"  # the pipeline and the registered model it makes
AUTOML_SERVICE = "iris-onnx"  # the service its last step deploys
AUTOML_SPEC: dict[str, Any] = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "env": {"DEMO": "iris-automl"},
    "nodes": [
        {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@latest"}},
        {
            "name": "split",
            "template": "data-split",
            "depends_on": ["load"],
            "args": {"test_size": 0.2, "seed": 1, "label_column": "species"},
        },
        {
            # A few seconds of search among three estimators: enough on iris, and cheap on a laptop's CPU.
            "name": "automl",
            "template": "automl",
            "depends_on": ["split"],
            "args": {
                "label_column": "species",
                "time_budget": 5,
                "estimators": "logistic_regression,knn,random_forest",
                "name": AUTOML,
            },
        },
        {
            "name": "explain",
            "template": "explain",
            "depends_on": ["automl"],
            "args": {"dataset": "iris@latest", "label_column": "species"},
        },
        {
            # After the explanation (the chart is of the version it optimises); measured on the split's held-out rows.
            "name": "optimise",
            "template": "onnx-optimise",
            "depends_on": ["automl", "explain"],
            "args": {
                "dataset": "iris@latest",
                "label_column": "species",
                "test_size": 0.2,
                "seed": 1,
                "stratify": True,
                "quantise": "int8",
                "register": "int8",
                "latency_runs": 20,
                "alias": "onnx",
            },
        },
        {
            "name": "serve",
            "template": "deploy",
            "depends_on": ["optimise"],  # the INT8 version it registered
            "args": {"service": AUTOML_SERVICE, "cpu": "0.5", "memory": "1Gi", "wait": 600},
        },
    ],
}


MEMORY_HOG = "memory-hog"
# Holds 400 MiB under a 128 MiB limit: stopped as OOMKilled, diagnosed "out of memory" (docs/diagnosis.md).
MEMORY_HOG_CODE = (
    "import time\nblock = bytearray(400 * 2**20)\nprint('holding', len(block) // 2**20, 'MiB')\ntime.sleep(30)\n"
)
MEMORY_HOG_SPEC: dict[str, Any] = {
    "failure_policy": "fail_fast",
    "nodes": [
        {
            "name": "hog",
            "template": "python",
            "resources": {"memory": "128Mi"},
            "args": {"code": MEMORY_HOG_CODE},
            "cache": False,
        }
    ],
}


def builtin_templates(_project: Project, _user: Any) -> None:
    """The built-in job templates the iris pipeline uses (loaded for the whole portal, not only the project)."""
    load_builtin_templates()


def iris_pipeline(project: Project, user: Any) -> Pipeline:
    """The iris pipeline (made once): it reads the datasets demo's iris dataset and registers "iris-classifier",
    which the models demo created and the serving demo follows."""
    existing = Pipeline.objects.filter(project=project, name="iris").first()
    if existing is not None:
        return existing
    return save_pipeline(
        project,
        user,
        name="iris",
        description=(
            "Load the newest iris dataset version, split it, train a classifier, evaluate it and register it."
        ),
        spec=IRIS_SPEC,
    )


def automl_pipeline(project: Project, user: Any) -> Pipeline:
    """The "iris-automl" pipeline (made once): AutoML on the iris dataset registers the best model as "iris-automl",
    which is explained (the importance chart on its version page), converted to ONNX and quantised to INT8 (the
    optimisation table on that version's page), and served as the "iris-onnx" service by its last step."""
    existing = Pipeline.objects.filter(project=project, name=AUTOML).first()
    if existing is not None:
        return existing
    return save_pipeline(
        project,
        user,
        name=AUTOML,
        description=(
            "iris → AutoML → explain → ONNX INT8 → serve: a few seconds of AutoML on the newest iris dataset version "
            "registers the best model, which is explained, optimised to ONNX INT8 (accuracy, latency and size before "
            "and after) and deployed as the iris-onnx service. Needs the train environment (`make train-env`)."
        ),
        spec=AUTOML_SPEC,
    )


def memory_hog_pipeline(project: Project, user: Any) -> Pipeline:
    """A pipeline that fails on purpose (made once): its task holds more memory than its limit, so its run page shows
    the failure diagnosis, "out of memory: …", with the next step to try."""
    existing = Pipeline.objects.filter(project=project, name=MEMORY_HOG).first()
    if existing is not None:
        return existing
    return save_pipeline(
        project,
        user,
        name=MEMORY_HOG,
        description=(
            "Fails on purpose: its task holds 400 MiB under a 128 MiB memory limit. Run it to see a failure "
            "diagnosed on the run page (out of memory) with the next step to try."
        ),
        spec=MEMORY_HOG_SPEC,
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # something answers there
    except OSError:
        return False


def _serve_api_if_needed(out: TextIO):
    """Tasks record their training and register models through the portal's API at SITE_URL. When nothing
    answers there (no `make run`), serve the portal from this process on a free loopback port instead."""
    if _answers(settings.SITE_URL):
        return None
    from portal.lib.serve import serve_in_thread  # uvicorn, only when nothing answers

    server, port, _thread = serve_in_thread()
    out.write(f"Nothing answers at {settings.SITE_URL}: serving the API from this process on port {port}.\n")
    settings.SITE_URL = f"http://127.0.0.1:{port}"
    return server


def run_headless(
    pipeline: Pipeline,
    user: Any,
    out: TextIO,
    timeout: float = 600,
    also: tuple[Pipeline, ...] = (),
    on_pass: Callable[[], Any] | None = None,
) -> list[PipelineRun]:
    """Run the pipeline to the end from this process, then each pipeline of `also` (the AutoML one; the memory hog,
    which fails on purpose), printing how each went and how its failures were diagnosed: uses the running agent, or
    starts one in-process. `on_pass` is called between polls (the command passes serving's reconcile, which Celery
    beat runs otherwise: a pipeline that deploys a service waits for its rollout). Returns the runs, in order."""
    from apps.runtime.local.runtime import live_agents  # the local runtime, only for `demo --run`

    server = _serve_api_if_needed(out)
    agent = None
    # The agent that runs a task also dispatches the next ones and tells them its SITE_URL: an API served from this
    # process is known only to an agent of this process, which takes every task this process dispatches.
    if server is not None or not live_agents().exists():
        from apps.runtime.local.agent import LocalAgent, running_here  # an agent in this process, if none runs

        agent = LocalAgent()
        threading.Thread(target=agent.run_forever, name="demo-agent", daemon=True).start()
        while running_here() is not agent:
            time.sleep(0.01)
        out.write("Started an agent in this process.\n")
    runs = []
    try:
        for each in (pipeline, *also):
            runs.append(_follow(start_run(each, user, trigger="demo"), out, timeout, on_pass))
            _print_outcome(runs[-1], out)
    finally:
        if agent is not None:
            agent.stopping.set()
        if server is not None:
            server.should_exit = True
    return runs


def _follow(run: PipelineRun, out: TextIO, timeout: float, on_pass: Callable[[], Any] | None = None) -> PipelineRun:
    """Advance `run` until it ends, printing each attempt's changes, then its diagnosed failures."""
    out.write(f"Started {run} (id {run.pk}).\n")
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while not run.is_finished and time.monotonic() < deadline:
        close_old_connections()
        orchestrator.advance_run(run.pk)
        if on_pass is not None:
            on_pass()
        run.refresh_from_db()
        for task in run.tasks.order_by("created_at", "pk"):
            key = f"{task.node}#{task.attempt}"
            if seen.get(key) != task.status:
                seen[key] = task.status
                extra = f" — {task.reason}" if task.reason else ""
                out.write(f"  {task.node:<10} attempt {task.attempt}: {task.status}{extra}\n")
        time.sleep(0.2)
    for task in run.tasks.exclude(failure_cause="").order_by("created_at", "pk"):
        found = task.diagnosis
        out.write(f"  {task.node}: {found['message']}\n    Next step: {found['suggestion']}\n")
    return run


def _print_outcome(run: PipelineRun, out: TextIO) -> None:
    out.write(f"{run}: {run.status}{' — ' + run.reason if run.reason else ''}\n")
    evaluate = run.tasks.filter(node="evaluate").order_by("-attempt").first()
    metrics = Path(evaluate.output_dir) / "metrics.json" if evaluate and evaluate.output_dir else None
    if metrics is not None and metrics.is_file():
        data = json.loads(metrics.read_text())
        shown = {k: v for k, v in data.items() if isinstance(v, int | float)}
        out.write(
            "Evaluation: "
            + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
            + "\n"
        )
    for task in run.tasks.filter(status="succeeded").order_by("created_at", "pk"):
        folder = Path(task.output_dir) if task.output_dir else None
        if folder is not None and (folder / "registered.json").is_file():
            data = json.loads((folder / "registered.json").read_text())
            kind = f", ONNX {data['variant']}" if data.get("variant") else ""
            out.write(
                f"Registered: {data['name']} version {data['version']} (alias {data.get('alias') or 'none'}{kind})\n"
            )
        if folder is not None and (folder / "deployed.json").is_file():
            data = json.loads((folder / "deployed.json").read_text())
            out.write(f"Deployed: service {data['service']} revision {data['revision']} at {data['url']}\n")
