"""The agent's per-tick sampling cost, before (main's TreeSampler: one summed sample per workload, a /proc scan per
replica) and after (this tree: one sample per replica with its GPU share, one /proc scan per tick shared by the
replicas), on real process trees. Prints the CPU time one tick costs the agent.

    .venv/bin/python bench/sampler.py [--replicas 4] [--children 3] [--ticks 300] [--before PATH]

`--before` is a copy of main's apps/runtime/local/processes.py (`git show main:apps/runtime/local/processes.py >
/tmp/processes_main.py`). GPU: without GPUs the probe is off (what a CPU machine pays); `--recorded` also times the
attribution against a recorded three-GPU reading (nvidia-smi's own run, twice a second per machine, is not timed:
no GPU here).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from apps.runtime.local.gpu import GpuProbe, GpuReading, attribute, visible_devices
from apps.runtime.local.processes import PROCESS_TABLE, TreeSampler

CHILD = "import time\ntime.sleep(600)\n"


def spawn_tree(children: int) -> subprocess.Popen:
    code = (
        "import subprocess, sys, time\n"
        f"procs = [subprocess.Popen([sys.executable, '-c', {CHILD!r}]) for _ in range({children})]\n"
        "time.sleep(600)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def load_before(path: str):
    spec = importlib.util.spec_from_file_location("processes_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TreeSampler


def tick_cost(tick, ticks: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of one tick."""
    walls, cpus = [], []
    for _ in range(ticks):
        w, c = time.perf_counter(), time.process_time()
        tick()
        walls.append((time.perf_counter() - w) * 1000)
        cpus.append((time.process_time() - c) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--children", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--before", default="/tmp/processes_main.py")
    parser.add_argument("--recorded", action="store_true")
    args = parser.parse_args()
    import django

    django.setup()
    trees = [spawn_tree(args.children) for _ in range(args.replicas)]
    time.sleep(1.5)
    sink_calls = []
    try:
        Before = load_before(args.before)
        old = [Before(p.pid) for p in trees]

        def before() -> None:
            cpu, rss = 0.0, 0
            for sampler in old:
                c, r = sampler.sample()
                cpu, rss = cpu + c, rss + r
            sink_calls.append((cpu, rss))

        new = [TreeSampler(p.pid) for p in trees]
        probe = GpuProbe(enabled=False)
        reading = GpuReading({0: 87.0, 1: 3.0, 2: 0.0}, {new[0].root.pid: [(0, 2**30)]}) if args.recorded else None

        def after() -> None:
            PROCESS_TABLE._at = float("-inf")  # ticks are a second apart in the agent: each reads /proc once
            for sampler in new:
                sampler.sample()
            got = probe.read() if reading is None else reading
            for sampler in new:
                gpu = attribute(got, sampler.pids, visible_devices({}), 1)
                sink_calls.append((sampler.cpu_percent, sampler.rss, gpu))

        for name, tick in (("before", before), ("after", after), ("before", before), ("after", after)):
            wall, cpu = tick_cost(tick, args.ticks)
            shape = f"{args.replicas} replicas x {args.children + 1} processes"
            print(f"{name:7} {shape}: {wall:.2f} ms wall, {cpu:.2f} ms CPU per tick")
    finally:
        for proc in trees:
            os.killpg(proc.pid, 9)
            proc.wait()


if __name__ == "__main__":
    main()
