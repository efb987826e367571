"""Orchestration overhead: no-op chains of 50, 200 and 2,000 nodes (the growth curve) and a 200-node fan-out
through the portal against a raw Celery chain/group of the same work, in the same run (issue 29).

Both sides run the same work per node (spawn /bin/true) on the same Redis broker; the portal adds
freezing, dispatch, quotas, the agent, state in the database and status events. Prints per-node
overhead and ratios, the CPU each process spent per node of the portal's runs (steadier than wall time on a shared
machine), issue 29's table row for the 200-node chain (target: ≤ 5 ms/node overhead, flat from 50 to 2,000 nodes)
with the growth curve, and the load average before and after.

    .venv/bin/python bench/orchestration.py [--nodes 50,200,2000] [--fanout 200] [--profile DIR]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override;
     --profile records the agent and the worker with py-spy, the executable named by PY_SPY)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path

from _env import PYTHON, cpu_seconds, database_cpu_seconds, prepare, start, stop, wait_for


def portal_run(pipeline, owner) -> float:
    from django.db import connection

    from apps.jobs.models import RUN_FINISHED
    from apps.jobs.services import start_run

    def finished() -> bool:  # a bare query: the ORM's would cost this process ~1 ms of the 2 cores per look
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM jobs_pipelinerun WHERE id = %s", [run.pk])
            return cursor.fetchone()[0] in RUN_FINISHED

    started = time.perf_counter()
    run = start_run(pipeline, owner)
    wait_for(finished, timeout=900, what="portal run")
    elapsed = time.perf_counter() - started
    run.refresh_from_db()
    assert run.status == "succeeded", run.reason
    return elapsed


def chain_spec(n: int) -> dict:
    nodes = [{"name": "n0", "template": "noop", "cache": False, "resources": {"cpu": 0}}]
    nodes += [
        {"name": f"n{i}", "template": "noop", "cache": False, "resources": {"cpu": 0}, "depends_on": [f"n{i - 1}"]}
        for i in range(1, n)
    ]
    return {"nodes": nodes}


def fan_spec(n: int) -> dict:
    nodes = [{"name": "root", "template": "noop", "cache": False, "resources": {"cpu": 0}}]
    nodes += [
        {"name": f"leaf{i}", "template": "noop", "cache": False, "resources": {"cpu": 0}, "depends_on": ["root"]}
        for i in range(n - 1)
    ]
    return {"nodes": nodes}


def spy(pid: int, out: Path) -> subprocess.Popen | None:
    """py-spy recording `pid` (and its subprocesses) into a flame graph, when PY_SPY names the executable."""
    exe = os.environ.get("PY_SPY")
    if not exe:
        return None
    args = [exe, "record", "--pid", str(pid), "--subprocesses", "--rate", "200", "--output", str(out)]
    args += ["--format", "raw"] if out.suffix == ".txt" else []
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="50,200,2000", help="chain lengths: the growth curve")
    parser.add_argument("--fanout", type=int, default=200, help="nodes of the fan-out DAG (0: none)")
    parser.add_argument("--profile", default="", help="a folder: py-spy profiles of the agent and worker (PY_SPY)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    var = prepare("orchestration")
    os.environ["DB_CONN_MAX_AGE"] = "300"  # as the Procfile runs the worker and the agent

    from celery import chain, group
    from django.db import connection

    from apps.jobs.models import JobTemplate
    from apps.jobs.services import save_pipeline
    from apps.projects.services import create_project
    from apps.runtime.local.runtime import live_agents
    from bench.celery_noop import noop
    from portal.celery import worker_command
    from tests.factories import UserFactory

    worker = start(worker_command(concurrency=2, include=["bench.celery_noop"]), var / "worker.log")
    agent = start([PYTHON, "manage.py", "runagent"], var / "agent.log")
    try:
        wait_for(lambda: live_agents().exists(), what="agent")
        owner = UserFactory(username="bench")
        project = create_project(owner, slug="bench", name="Bench")
        JobTemplate.objects.create(slug="noop", name="no-op", command=["/bin/true"], resources={"cpu": 0})
        shapes = [(f"chain {n}", n, "chain", chain_spec(n)) for n in sizes]
        if args.fanout:
            shapes.append((f"fan-out {args.fanout}", args.fanout, "group", fan_spec(args.fanout)))

        noop.delay().get(timeout=60)  # warm up the worker
        load_before = os.getloadavg()
        results, cpu = [], []
        for label, n, kind, spec in shapes:
            pipe = save_pipeline(project, owner, name=label.replace(" ", "-"), spec=spec)
            canvas = chain if kind == "chain" else group
            started = time.perf_counter()
            canvas(noop.si() for _ in range(n)).apply_async().get(timeout=900)
            celery_s = time.perf_counter() - started
            spies = []
            if args.profile:
                folder = Path(args.profile)
                folder.mkdir(parents=True, exist_ok=True)
                tag = label.replace(" ", "-")
                spies = [spy(agent.pid, folder / f"agent-{tag}.txt"), spy(worker.pid, folder / f"worker-{tag}.txt")]
                time.sleep(1)  # py-spy attaches
            before = (cpu_seconds(agent), cpu_seconds(worker), database_cpu_seconds(), time.process_time())
            portal_s = portal_run(pipe, owner)
            after = (cpu_seconds(agent), cpu_seconds(worker), database_cpu_seconds(), time.process_time())
            for each in spies:
                if each is not None:
                    each.send_signal(signal.SIGINT)
                    each.wait(timeout=60)
            results.append((label, n, portal_s, celery_s))
            cpu.append((label, *((b - a) / n * 1000 for a, b in zip(before, after, strict=True))))
        load_after = os.getloadavg()

        print(f"\nNo-op DAGs ({connection.vendor}, Redis broker): the portal against a raw Celery canvas of the same")
        print("work (each node spawns /bin/true), in the same run")
        header = ("shape", "portal total", "celery total", "portal/node", "celery/node", "overhead/node", "ratio")
        print("{:<14}{:>14}{:>14}{:>13}{:>13}{:>15}{:>8}".format(*header))
        overhead = {}
        for label, n, portal_s, celery_s in results:
            overhead[label] = (portal_s - celery_s) / n * 1000
            print(
                f"{label:<14}{portal_s:>12.2f} s{celery_s:>12.2f} s{portal_s / n * 1000:>10.1f} ms"
                f"{celery_s / n * 1000:>10.1f} ms{overhead[label]:>12.1f} ms{portal_s / celery_s:>7.1f}×"
            )
        print("\nCPU per node of the portal's runs (ms)")
        print("{:<14}{:>10}{:>10}{:>10}{:>10}".format("shape", "agent", "worker", "database", "bench"))
        for label, *values in cpu:
            print(f"{label:<14}" + "".join(f"{v:>10.1f}" for v in values))
        agent_cpu = {label: values[0] for label, *values in cpu}
        row = next((r for r in results if r[0] == "chain 200"), results[0])
        label, n, portal_s, celery_s = row
        print("\n| path | now | floor / peer in the same run | target |\n|---|---|---|---|")
        print(
            f"| orchestration, {n}-node chain | {overhead[label]:.1f} ms/node overhead; agent CPU "
            f"{agent_cpu[label]:.1f} ms/node | raw Celery chain {celery_s / n * 1000:.1f} ms/node | "
            "≤ 5 ms/node, flat from 50 to 2,000 nodes |"
        )
        chains = [r for r in results if r[0].startswith("chain")]
        curve = " / ".join(f"{overhead[r[0]]:.1f}" for r in chains)
        agents = " / ".join(f"{agent_cpu[r[0]]:.1f}" for r in chains)
        nodes = " / ".join(str(r[1]) for r in chains)
        print(f"growth curve, chain of {nodes} nodes: overhead {curve} ms/node; agent CPU {agents} ms/node")
        loads = " ".join(f"{v:.2f}" for v in load_before), " ".join(f"{v:.2f}" for v in load_after)
        print("load average before: {}, after: {}".format(*loads))
    finally:
        stop(worker, agent)


if __name__ == "__main__":
    main()
