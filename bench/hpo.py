"""Studies: the portal's overhead per trial vs plain Optuna, and TPE vs random on Branin (issue 23's two figures).

Overhead: a study of `--trials` trials (random sampler, seed 1, `--parallel` at once) whose trial is a no-op objective:
a task that logs `value = x` to the portal's MLflow API and ends. The portal side is every driver pass
(`apps.hpo.driver.advance_study`: claim, load, follow the running trials, ask, the runs' start through
`jobs.services.RunBatch` (`start_spec_run` for the pass's runs together), the trial rows, reading the logged values,
tell, importance, events), timed inside this process and broken down by step; the task's own process and HTTP calls are
not counted. Passes happen as in production: when a trial's run ends (the run-finished kick) and on the beat
(`--interval`, default PORTAL_HPO_INTERVAL). The peer: the same sampler driven by plain Optuna ask-and-tell in one
process, on the same storage (the portal's PostgreSQL schema) and in memory. Target (issue 23): ≤ 50 ms per trial of
portal overhead beyond the task's own start (the run's start is shown on its own line, and the figure is given with and
without it).

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
        self.cpu: dict[str, float] = defaultdict(float)  # this thread's CPU time in each step
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
        began, cpu = time.perf_counter(), time.thread_time()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.seconds[name] += time.perf_counter() - began
            self.cpu[name] += time.thread_time() - cpu

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
    timings.wrap(driver, "_ask", "Optuna ask (+ sample)")
    timings.wrap(driver.search_space, "sample", "Optuna ask (+ sample)")
    # The runs' start: each trial's spec frozen into the pass's batch, then the batch's runs created and queued.
    timings.wrap(driver.RunBatch, "__init__", "the run's start (jobs.RunBatch)")
    timings.wrap(driver.RunBatch, "add", "the run's start (jobs.RunBatch)")
    timings.wrap(driver.RunBatch, "start", "the run's start (jobs.RunBatch)")
    timings.wrap(collect, "points", "read step values")
    timings.wrap(collect, "final_values", "read final values")
    timings.wrap(optuna.trial.Trial, "report", "report to the pruner")
    timings.wrap(driver, "_tell", "Optuna tell")
    timings.wrap(driver, "_tag_tracking_runs", "tag the tracking runs")
    timings.wrap(driver, "_update_importance", "parameter importance")
    timings.count_queries()
    return timings


def plain_optuna(trials: int, storage, sampler_factory=None) -> tuple[float, float]:
    """Seconds per trial (wall, and CPU of this thread) of ask → no-op objective → tell with the same sampler, in
    this process."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = sampler_factory() if sampler_factory else optuna.samplers.RandomSampler(seed=1)
    study = optuna.create_study(storage=storage, sampler=sampler, direction="minimize")
    began, cpu = time.perf_counter(), time.thread_time()
    for _ in range(trials):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(-10, 10)})
        study.tell(trial, trial.params["x"])
    return (time.perf_counter() - began) / trials, (time.thread_time() - cpu) / trials


def task_start(samples: int = 5) -> float:
    """The task's own start, in seconds (median of `samples`): a fresh interpreter of the tasks' environment that
    imports what the no-op trial imports and exits, started the way the agent starts a task's process. No trial run
    as its own process starts faster; nothing of the portal is in it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    code = "from apps.jobs.builtin_tasks._tracking import Tracking"
    times = []
    for _ in range(samples):
        began = time.perf_counter()
        subprocess.run([PYTHON, "-c", code], cwd=root, check=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def drive(study, interval: float, timings: Timings | None = None, profile=None) -> tuple[float, int, float, float]:
    """Run the study to its end as production does: the workers advance the runs, a pass follows each run that
    ended (the kick) and one runs every `interval` s (the beat). (seconds in passes, passes, wall seconds, CPU
    seconds of this thread in the passes)."""
    from apps.hpo import driver
    from apps.hpo.models import Trial
    from apps.jobs import orchestrator

    in_driver, passes, began, last_beat, cpu = 0.0, 0, time.perf_counter(), 0.0, 0.0
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
            t0, c0 = time.perf_counter(), time.thread_time()
            if profile is not None:
                profile.enable()
            driver.advance_study(study.pk)
            if profile is not None:
                profile.disable()
            in_driver += time.perf_counter() - t0
            cpu += time.thread_time() - c0
            if timings is not None:
                timings.counting = False
            passes += 1
            study.refresh_from_db()
            if study.is_finished:
                return in_driver, passes, time.perf_counter() - began, cpu
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
    profile = None
    if options.profile:
        import cProfile

        profile = cProfile.Profile()
    in_driver, passes, wall, in_driver_cpu = drive(study, options.interval, timings, profile)
    if profile is not None:
        import pstats

        profile.dump_stats(options.profile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    done = study.trials.filter(status="complete").count()
    if study.status != "completed" or done != options.trials:
        raise SystemExit(f"the study ended {study.status} ({study.reason}) with {done}/{options.trials} complete")
    steps, cpu, queries = dict(timings.seconds), dict(timings.cpu), dict(timings.queries)  # before plain Optuna's
    timings.queries["optuna"], timings.counting = 0, True
    same_storage, same_storage_cpu = plain_optuna(options.trials, storage.get_storage())
    timings.counting = False
    plain_queries = timings.queries["optuna"] / options.trials
    in_memory, _cpu = plain_optuna(options.trials, None)
    floor = task_start()

    n = options.trials
    per_trial, per_trial_cpu = in_driver / n, in_driver_cpu / n
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"Overhead: {n} no-op trials, {options.parallel} in parallel, on {engine}; {passes} driver passes "
          f"(kicked when a run ends, beat every {options.interval:g} s); "
          f"load average now {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"  {'':<56}{'ms/trial':>10}{'CPU ms':>8}")
    for name, seconds in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<56}{seconds / n * 1000:>10.1f}{cpu[name] / n * 1000:>8.1f}")
    rest, rest_cpu = in_driver - sum(steps.values()), in_driver_cpu - sum(cpu.values())
    own = "the passes’ own queries (claim, counts, rows, events)"
    print(f"  {own:<56}{rest / n * 1000:>10.1f}{rest_cpu / n * 1000:>8.1f}")
    print(f"  {'portal driver, all of it':<56}{per_trial * 1000:>10.1f}{per_trial_cpu * 1000:>8.1f}")
    print(f"  {'plain Optuna ask+tell, same storage':<56}{same_storage * 1000:>10.1f}{same_storage_cpu * 1000:>8.1f}")
    print(f"  {'plain Optuna ask+tell, in memory':<56}{in_memory * 1000:>10.1f}")
    print(f"  {'the task’s own start (floor: interpreter + imports)':<56}{floor * 1000:>10.1f}")
    print(f"  {'wall clock per trial (tasks included)':<56}{wall / n * 1000:>10.1f}")
    statements = (queries["portal"] + queries["optuna"]) / n
    print(
        f"  SQL statements per trial in the passes: {queries['portal'] / n:.1f} the portal's, "
        f"{queries['optuna'] / n:.1f} Optuna's (plain Optuna's ask+tell on the same storage: {plain_queries:.1f}); "
        f"ms per statement: {per_trial * 1000 / statements:.1f} in the passes (the tasks running beside them), "
        f"{same_storage * 1000 / plain_queries:.1f} in plain Optuna (alone)"
    )
    beyond, beyond_cpu = per_trial - same_storage, per_trial_cpu - same_storage_cpu
    print(f"  portal overhead beyond plain Optuna (the run's start included; the task's own start is not in it): "
          f"{beyond * 1000:.1f} ms/trial (target ≤ 50), {beyond_cpu * 1000:.1f} ms/trial of CPU; "
          f"the task's own start is {floor * 1000:.0f} ms, so the overhead is {beyond / floor:.2f}× it; "
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
    parser.add_argument("--profile", help="write cProfile's statistics of the driver's passes to this file")
    parser.add_argument("--port", type=int, default=0, help="the API's port (default: a free one)")
    options = parser.parse_args()
    if options.quick:
        options.trials, options.quality_trials, options.seeds = 20, 20, 2
    var = prepare("hpo")

    from django.conf import settings

    from apps.projects.services import create_project
    from apps.runtime.local.runtime import live_agents
    from portal.lib.serve import free_port
    from tests.factories import UserFactory, python_template

    if options.interval is None:
        options.interval = float(settings.PORTAL_HPO_INTERVAL)
    load = os.getloadavg()[0]
    print(f"Machine: {os.cpu_count()} CPUs, load average {load:.1f} at the start (milliseconds scale with the load and "
          "the database's round trip; the SQL counts below do not)")  # fmt: skip
    # The tasks' tracking API in a process of its own, as in production (in a thread of this one, it would take the
    # interpreter's lock from the passes while it serves the tasks' requests, and their time would count as the
    # driver's).
    port = options.port or free_port()
    web = start([PYTHON, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                 "--log-level", "warning"], var / "web.log")  # fmt: skip
    settings.SITE_URL = f"http://127.0.0.1:{port}"
    os.environ["SITE_URL"] = settings.SITE_URL  # the agent gives it to the tasks
    agent = start([PYTHON, "manage.py", "runagent"], var / "agent.log")
    try:
        wait_for(lambda: _listening(port), what="the API")
        wait_for(lambda: live_agents().exists(), what="agent")
        owner = UserFactory(username="bench")
        project = create_project(owner, slug="bench", name="Bench")
        python_template()
        if options.only != "quality":
            overhead(options, owner, project)
        if options.only != "overhead":
            quality(options, owner, project)
    finally:
        stop(agent, web)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    main()
