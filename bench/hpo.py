"""Studies: the portal's overhead per trial vs plain Optuna, and TPE vs random on Branin (issue 23's two figures).

Overhead: a study of `--trials` trials (random sampler, seed 1, `--parallel` at once) whose trial is a no-op
objective: a task that logs `value = x` to the portal's MLflow API and ends. The portal side is every driver pass
(`apps.hpo.driver.advance_study`: claim, load, follow the running trials, ask, the run's start through
`jobs.services.start_spec_run`, the trial row, reading the logged values, tell, importance, events), timed inside
this process and broken down by step; the task's own process and HTTP calls are not counted. Passes happen as in
production: when a trial's run ends (the run-finished kick) and on the beat (`--interval`, default
PORTAL_HPO_INTERVAL). The peer: the same sampler driven by plain Optuna ask-and-tell in one process, on the same
storage (the portal's PostgreSQL schema) and in memory. Target (issue 23): ≤ 50 ms per trial of portal overhead
beyond the task's own start (the run's start is shown on its own line, and the figure is given with and without it).

Quality: Branin (minimum 0.397887) through the portal, `--quality-trials` trials (50) per study, TPE and random,
`--seeds` seeds (5) each, trials one at a time (as Optuna's own benchmarks run them); each trial is a task that
prints `value=<branin(x1, x2)>` (the stdout collector). Prints the mean best value of each sampler over the seeds.

    .venv/bin/python bench/hpo.py [--trials 100] [--parallel 4] [--quality-trials 50] [--seeds 5]
    .venv/bin/python bench/hpo.py --quick        # 20 overhead trials, 20 quality trials × 2 seeds
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
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
BRANIN = """
import math
x1, x2 = ${trial.x1}, ${trial.x2}
a, b, c, r, s, t = 1, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
print(f"value={a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s!r}")
"""
BRANIN_MINIMUM = 0.397887
ACTIVE = ["queued", "running", "cancelling"]


class Timings:
    """Seconds spent in each step of the driver's passes (the rest of a pass is its own bookkeeping)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth = 0
        self.queries = {"portal": 0, "optuna": 0}
        self.counting = False

    def count_queries(self) -> None:
        """Count the SQL statements of the passes: the portal's (Django) and Optuna's (SQLAlchemy). On a loaded
        machine the milliseconds swing; the counts do not."""
        from django.db import connection
        from sqlalchemy import event

        from apps.hpo import storage

        def django_query(execute, sql, params, many, context):
            if self.counting:
                self.queries["portal"] += 1
            return execute(sql, params, many, context)

        connection.execute_wrappers.append(django_query)

        def optuna_query(*args):
            if self.counting:
                self.queries["optuna"] += 1

        event.listen(storage.get_storage().engine, "before_cursor_execute", optuna_query)

    @contextmanager
    def step(self, name: str):
        began = time.perf_counter()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.seconds[name] += time.perf_counter() - began

    def wrap(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            with self.step(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


def instrument() -> Timings:
    """Time the driver's steps where they are called (module attributes, so nothing else changes)."""
    import optuna

    from apps.hpo import collect, driver, storage

    timings = Timings()
    timings.wrap(storage, "load", "load the Optuna study")
    timings.wrap(driver, "_fail_orphans", "fail orphaned Optuna trials")
    timings.wrap(optuna.Study, "ask", "Optuna ask (+ sample)")
    timings.wrap(driver.search_space, "sample", "Optuna ask (+ sample)")
    timings.wrap(driver, "start_spec_run", "the run's start (jobs.start_spec_run)")
    timings.wrap(collect, "points", "read step values")
    timings.wrap(collect, "final_values", "read final values")
    timings.wrap(optuna.trial.Trial, "report", "report to the pruner")
    timings.wrap(optuna.Study, "tell", "Optuna tell")
    timings.wrap(driver, "_tag_tracking_run", "tag the tracking run")
    timings.wrap(driver, "_update_importance", "parameter importance")
    timings.count_queries()
    return timings


def plain_optuna(trials: int, storage, sampler_factory=None) -> float:
    """Seconds per trial of ask → no-op objective → tell with the same sampler, in this process."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_factory() if sampler_factory else optuna.samplers.RandomSampler(seed=1)
    study = optuna.create_study(storage=storage, sampler=sampler, direction="minimize")
    began = time.perf_counter()
    for _ in range(trials):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(-10, 10)})
        study.tell(trial, trial.params["x"])
    return (time.perf_counter() - began) / trials


def drive(study, interval: float, timings: Timings | None = None) -> tuple[float, int, float]:
    """Run the study to its end as production does: the workers advance the runs, a pass follows each run that
    ended (the kick) and one runs every `interval` s (the beat). (seconds in passes, passes, wall seconds)."""
    from apps.hpo import driver
    from apps.hpo.models import Trial
    from apps.jobs import orchestrator

    in_driver, passes, began, last_beat = 0.0, 0, time.perf_counter(), 0.0
    while True:
        active = list(study.trials.filter(status="running").values_list("run_id", "run__status"))
        for run_id, status in active:
            if status in ACTIVE:
                orchestrator.advance_run(run_id)
        ended = Trial.objects.filter(study=study, status="running").exclude(run__status__in=ACTIVE).exists()
        now = time.perf_counter()
        if ended or now - last_beat >= interval:
            last_beat = now if not ended else last_beat
            if timings is not None:
                timings.counting = True
            t0 = time.perf_counter()
            driver.advance_study(study.pk)
            in_driver += time.perf_counter() - t0
            if timings is not None:
                timings.counting = False
            passes += 1
            study.refresh_from_db()
            if study.is_finished:
                return in_driver, passes, time.perf_counter() - began
        time.sleep(0.02)


def overhead(options, owner, project) -> None:
    import optuna
    from django.conf import settings

    from apps.hpo import services, storage

    optuna.importance.get_param_importances  # noqa: B018 (its first import costs seconds, once per worker)
    timings = instrument()
    study = services.create_study(project, owner, {
        "name": "bench", "objectives": [{"metric": "value", "direction": "minimize"}],
        "space": {"x": {"type": "float", "low": -10, "high": 10}}, "algorithm": "random", "seed": 1,
        "budget": {"max_trials": options.trials, "parallel_trials": options.parallel, "max_failed_trials": 0},
        "trial_template": {"job_template": "py", "args": {"code": NOOP}},
    })  # fmt: skip
    in_driver, passes, wall = drive(study, options.interval, timings)
    done = study.trials.filter(status="complete").count()
    if study.status != "completed" or done != options.trials:
        raise SystemExit(f"the study ended {study.status} ({study.reason}) with {done}/{options.trials} complete")
    steps, queries = dict(timings.seconds), dict(timings.queries)  # before plain Optuna's own asks and tells
    timings.queries["optuna"], timings.counting = 0, True
    same_storage = plain_optuna(options.trials, storage.get_storage())
    timings.counting = False
    plain_queries = timings.queries["optuna"] / options.trials
    in_memory = plain_optuna(options.trials, None)

    n = options.trials
    per_trial = in_driver / n
    start_run = steps["the run's start (jobs.start_spec_run)"] / n
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"Overhead: {n} no-op trials, {options.parallel} in parallel, on {engine}; {passes} driver passes "
          f"(kicked when a run ends, beat every {options.interval:g} s)")  # fmt: skip
    print(f"  {'':<50}{'ms/trial':>10}")
    for name, seconds in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<50}{seconds / n * 1000:>10.1f}")
    rest = in_driver - sum(steps.values())
    print(f"  {'the passes’ own queries (claim, counts, rows, events)':<50}{rest / n * 1000:>10.1f}")
    print(f"  {'portal driver, all of it':<50}{per_trial * 1000:>10.1f}")
    print(f"  {'plain Optuna ask+tell, same storage':<50}{same_storage * 1000:>10.1f}")
    print(f"  {'plain Optuna ask+tell, in memory':<50}{in_memory * 1000:>10.1f}")
    print(f"  {'wall clock per trial (tasks included)':<50}{wall / n * 1000:>10.1f}")
    print(
        f"  SQL statements per trial in the passes: {queries['portal'] / n:.1f} the portal's, "
        f"{queries['optuna'] / n:.1f} Optuna's (plain Optuna's ask+tell on the same storage: {plain_queries:.1f})"
    )
    beyond = per_trial - same_storage
    print(f"  portal overhead beyond plain Optuna: {beyond * 1000:.1f} ms/trial; beyond plain Optuna and the run's "
          f"start: {(beyond - start_run) * 1000:.1f} ms/trial (target ≤ 50); "
          f"ratio driver / plain Optuna on the same storage: {per_trial / same_storage:.1f}×")  # fmt: skip


def quality(options, owner, project) -> None:
    from apps.hpo import services

    best: dict[str, list[float]] = {"tpe": [], "random": []}
    began = time.perf_counter()
    for seed in range(options.seeds):
        for algorithm in ("tpe", "random"):
            study = services.create_study(project, owner, {
                "name": f"branin-{algorithm}-{seed}", "objectives": [{"metric": "value", "direction": "minimize"}],
                "space": {"x1": {"type": "float", "low": -5, "high": 10},
                          "x2": {"type": "float", "low": 0, "high": 15}},
                "algorithm": algorithm, "seed": seed, "metrics_collector": "stdout",
                "budget": {"max_trials": options.quality_trials, "parallel_trials": options.quality_parallel,
                           "max_failed_trials": 0},
                "trial_template": {"job_template": "py", "args": {"code": BRANIN}},
            })  # fmt: skip
            drive(study, options.interval)
            if study.status != "completed":
                failed = list(study.trials.filter(status="failed").values_list("number", "reason"))
                raise SystemExit(f"{study.name} ended {study.status}: {study.reason} {failed}")
            best[algorithm].append(study.best_trials()[0].value)
    tpe, rnd = statistics.mean(best["tpe"]), statistics.mean(best["random"])
    print(f"Quality: Branin (minimum {BRANIN_MINIMUM}), {options.quality_trials} trials per study "
          f"({options.quality_parallel} at a time), {options.seeds} seeds, through the portal "
          f"({time.perf_counter() - began:.0f} s)")  # fmt: skip
    print(f"  {'sampler':<10}{'mean best':>12}{'gap to minimum':>16}   per seed")
    for name, values in (("TPE", best["tpe"]), ("random", best["random"])):
        mean = statistics.mean(values)
        print(f"  {name:<10}{mean:>12.4f}{mean - BRANIN_MINIMUM:>16.4f}   " + ", ".join(f"{v:.3f}" for v in values))
    verdict = "better" if tpe < rnd else "NOT better"
    print(f"  TPE is {verdict} than random: gap ratio random / TPE = "
          f"{(rnd - BRANIN_MINIMUM) / max(tpe - BRANIN_MINIMUM, 1e-12):.1f}×")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--quality-trials", type=int, default=50)
    parser.add_argument("--quality-parallel", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=None, help="the beat (default: PORTAL_HPO_INTERVAL)")
    parser.add_argument("--only", choices=["overhead", "quality"], help="run one figure only")
    parser.add_argument("--quick", action="store_true", help="20 overhead trials, 20 quality trials × 2 seeds")
    parser.add_argument("--port", type=int, default=0, help="the API's port (default: a free one)")
    options = parser.parse_args()
    if options.quick:
        options.trials, options.quality_trials, options.seeds = 20, 20, 2
    var = prepare("hpo")

    from django.conf import settings

    from apps.projects.services import create_project
    from apps.runtime.local.runtime import live_agents
    from portal.lib.serve import serve_in_thread
    from tests.factories import UserFactory, python_template

    if options.interval is None:
        options.interval = float(settings.PORTAL_HPO_INTERVAL)
    load = os.getloadavg()[0]
    print(f"Machine: {os.cpu_count()} CPUs, load average {load:.1f} at the start (milliseconds scale with the load and "
          "the database's round trip; the SQL counts below do not)")  # fmt: skip
    server, port, _thread = serve_in_thread(options.port or None)  # the tasks' tracking API
    settings.SITE_URL = f"http://127.0.0.1:{port}"
    os.environ["SITE_URL"] = settings.SITE_URL  # the agent gives it to the tasks
    agent = start([PYTHON, "manage.py", "runagent"], var / "agent.log")
    try:
        wait_for(lambda: live_agents().exists(), what="agent")
        owner = UserFactory(username="bench")
        project = create_project(owner, slug="bench", name="Bench")
        python_template()
        if options.only != "quality":
            overhead(options, owner, project)
        if options.only != "overhead":
            quality(options, owner, project)
    finally:
        stop(agent)
        server.should_exit = True


if __name__ == "__main__":
    main()
