"""Studies: the portal's overhead per trial vs plain Optuna (issue 23's benchmark, first figure).

A study of `--trials` trials (random sampler, seed 1, `--parallel` at once) whose trial is a no-op objective: a task
that logs `value = x` to the portal's MLflow API and ends. The portal side is everything the driver does for a trial
(`apps.hpo.driver.advance_study`: ask, the run's start through `jobs.services.start_spec_run`, the trial row, reading
the logged values, tell, importance, status events), timed inside this process; the task's own start and run (agent,
process, HTTP) are not counted. The peer: the same sampler driven by plain Optuna ask-and-tell in one process, on
the same storage (the portal's PostgreSQL schema) and in memory. Target (issue 23): ≤ 50 ms per trial of portal
overhead beyond plain Optuna on the same storage.

    .venv/bin/python bench/hpo.py [--trials 100] [--parallel 4]

Not yet: the TPE-vs-random quality figure on the Branin function.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _env import PYTHON, prepare, start, stop, wait_for

NOOP = """
import os
from apps.jobs.builtin_tasks._tracking import Tracking
tracking = Tracking()
run = tracking.start_run(os.environ["MLFLOW_EXPERIMENT_NAME"], None, {})
tracking.log_batch(run["run_id"], metrics={"value": ${trial.x}})
tracking.end_run(run["run_id"])
"""


def plain_optuna(trials: int, storage) -> float:
    """Seconds per trial of ask → no-op objective → tell with the same sampler, in this process."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=1), direction="minimize")
    began = time.perf_counter()
    for _ in range(trials):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(-10, 10)})
        study.tell(trial, trial.params["x"])
    return (time.perf_counter() - began) / trials


def portal_study(trials: int, parallel: int, owner, project) -> tuple[float, float, int]:
    """(driver seconds per trial, wall seconds per trial, trials completed) of a study driven as the beat does."""
    from apps.hpo import driver, services
    from apps.jobs import orchestrator

    study = services.create_study(project, owner, {
        "name": "bench", "objectives": [{"metric": "value", "direction": "minimize"}],
        "space": {"x": {"type": "float", "low": -10, "high": 10}}, "algorithm": "random", "seed": 1,
        "budget": {"max_trials": trials, "parallel_trials": parallel, "max_failed_trials": 0},
        "trial_template": {"job_template": "py", "args": {"code": NOOP}},
    })  # fmt: skip
    in_driver = 0.0
    began = time.perf_counter()
    while True:
        for run_id in study.trials.filter(run__status__in=["pending", "queued", "running"]).values_list(
            "run_id", flat=True
        ):
            orchestrator.advance_run(run_id)
        t0 = time.perf_counter()
        driver.advance_study(study.pk)
        in_driver += time.perf_counter() - t0
        study.refresh_from_db()
        if study.is_finished:
            break
        time.sleep(0.05)
    wall = time.perf_counter() - began
    done = study.trials.filter(status="complete").count()
    if study.status != "completed" or done != trials:
        raise SystemExit(f"the study ended {study.status} ({study.reason}) with {done}/{trials} trials complete")
    return in_driver / trials, wall / trials, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=4)
    options = parser.parse_args()
    var = prepare("hpo")

    from django.conf import settings

    from apps.hpo import storage
    from apps.projects.services import create_project
    from apps.runtime.local.runtime import live_agents
    from portal.lib.serve import serve_in_thread
    from tests.factories import UserFactory, python_template

    server, port, _thread = serve_in_thread()  # the tasks' tracking API
    settings.SITE_URL = f"http://127.0.0.1:{port}"
    os.environ["SITE_URL"] = settings.SITE_URL  # the agent gives it to the tasks
    agent = start([PYTHON, "manage.py", "runagent"], var / "agent.log")
    try:
        wait_for(lambda: live_agents().exists(), what="agent")
        owner = UserFactory(username="bench")
        project = create_project(owner, slug="bench", name="Bench")
        python_template()
        per_trial, wall, done = portal_study(options.trials, options.parallel, owner, project)
        same_storage = plain_optuna(options.trials, storage.get_storage())
        in_memory = plain_optuna(options.trials, None)
    finally:
        stop(agent)
        server.should_exit = True
    overhead = per_trial - same_storage
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"{done} trials, {options.parallel} in parallel, on {engine}")
    print(f"{'':<44}{'ms/trial':>10}")
    print(f"{'portal driver (ask, start run, read, tell)':<44}{per_trial * 1000:>10.1f}")
    print(f"{'plain Optuna, same storage':<44}{same_storage * 1000:>10.1f}")
    print(f"{'plain Optuna, in memory':<44}{in_memory * 1000:>10.1f}")
    print(f"{'wall clock per trial (tasks included)':<44}{wall * 1000:>10.1f}")
    print(f"portal overhead beyond plain Optuna: {overhead * 1000:.1f} ms/trial (target ≤ 50) — "
          f"ratio driver / plain Optuna on the same storage: {per_trial / same_storage:.1f}×")  # fmt: skip


if __name__ == "__main__":
    main()
