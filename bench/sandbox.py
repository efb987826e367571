"""What the local sandbox costs per spawn (apps/runtime/local/sandbox.py), against a plain process.

    .venv/bin/python bench/sandbox.py [--runs 30]

Three timings, each the median of --runs, of starting and waiting for `/bin/true` and for `python -c pass` (the
task environment's interpreter):
- plain: subprocess.Popen, as the agent starts a workload with PORTAL_LOCAL_SANDBOX=off;
- network: a workload's network namespace (holder + pasta forwarding the portal's port), once per notebook or model
  server; a task takes its project's shared one (apps/runtime/local/sandbox.py, `open_network`);
- replica: nsenter + prlimit + bubblewrap around the command, once per replica (the namespace already open).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402

from apps.runtime.local import sandbox  # noqa: E402
from apps.runtime.workload import Workload  # noqa: E402


def timed(action, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    found = sandbox.support()
    if not found.available:
        sys.exit(f"no sandbox here: {found.reason}")
    work = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    settings.PORTAL_WORK_DIR = work
    cwd = work / "p" / "run-1" / "node" / "attempt-1"
    cwd.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin"}
    python = settings.PORTAL_TASK_ENVS["default"]
    print(f"{args.runs} runs each, median ms")
    for label, argv in (("/bin/true", ["/bin/true"]), ("python -c pass", [python, "-c", "pass"])):
        workload = Workload(uid="bench", name="bench", project="p", command=argv, workdir=str(cwd))
        plain = timed(lambda argv=argv: subprocess.run(argv, cwd=cwd, env=env, check=True), args.runs)
        with sandbox.open_network(workload) as network:
            wrapped, wrapped_env = sandbox.wrap(argv, str(cwd), env, workload, network)
            replica = timed(lambda w=wrapped, e=wrapped_env: subprocess.run(w, cwd=cwd, env=e, check=True), args.runs)
        print(f"{label:>16}: plain {plain:7.1f}   sandboxed replica {replica:7.1f}   (+{replica - plain:.1f})")
    fresh = timed(lambda: sandbox.Network(found, outbound=sandbox.portal_port(), inbound=[]).close(), args.runs)
    print(f"{'network':>16}: {fresh:7.1f} for a namespace of its own (holder + pasta: a notebook, a model server)")
    with sandbox.open_network(workload):  # the project's shared namespace, kept open meanwhile
        pooled = timed(lambda: sandbox.open_network(workload).close(), args.runs)
    print(f"{'':>16}  {pooled:7.1f} for a task, in its project's shared namespace")


if __name__ == "__main__":
    main()
