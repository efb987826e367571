"""Orchestration overhead: a 200-node no-op DAG through the portal vs a raw Celery chain/group.

Both sides run the same work per node (spawn /bin/true) on the same Redis broker; the portal adds
freezing, dispatch, quotas, the agent, state in the database and status events. Prints per-node
overhead and ratios (target: ≤ 20 ms overhead per node), then the CPU each process spent per node of the portal's
runs (steadier than wall time on a shared machine) and the load average before and after.

    .venv/bin/python bench/orchestration.py [--nodes 200]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override)
"""

from __future__ import annotations

import argparse
import os
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=200)
    n = parser.parse_args().nodes
    var = prepare("orchestration")
    os.environ["DB_CONN_MAX_AGE"] = "300"  # as the Procfile runs the worker and the agent

    from celery import chain, group

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
        chain_nodes = [{"name": "n0", "template": "noop", "cache": False, "resources": {"cpu": 0}}]
        chain_nodes += [
            {"name": f"n{i}", "template": "noop", "cache": False, "resources": {"cpu": 0}, "depends_on": [f"n{i - 1}"]}
            for i in range(1, n)
        ]
        fan_nodes = [{"name": "root", "template": "noop", "cache": False, "resources": {"cpu": 0}}]
        fan_nodes += [
            {"name": f"leaf{i}", "template": "noop", "cache": False, "resources": {"cpu": 0}, "depends_on": ["root"]}
            for i in range(n - 1)
        ]
        chain_pipe = save_pipeline(project, owner, name="chain", spec={"nodes": chain_nodes})
        fan_pipe = save_pipeline(project, owner, name="fanout", spec={"nodes": fan_nodes})

        noop.delay().get(timeout=60)  # warm up the worker
        load_before = os.getloadavg()
        results, cpu = [], []
        for label, pipe, raw in (
            ("chain", chain_pipe, lambda: chain(noop.si() for _ in range(n)).apply_async().get(timeout=600)),
            ("fan-out", fan_pipe, lambda: group(noop.si() for _ in range(n)).apply_async().get(timeout=600)),
        ):
            started = time.perf_counter()
            raw()
            celery_s = time.perf_counter() - started
            before = (cpu_seconds(agent), cpu_seconds(worker), database_cpu_seconds(), time.process_time())
            portal_s = portal_run(pipe, owner)
            after = (cpu_seconds(agent), cpu_seconds(worker), database_cpu_seconds(), time.process_time())
            results.append((label, portal_s, celery_s))
            cpu.append((label, *((b - a) / n * 1000 for a, b in zip(before, after, strict=True))))
        load_after = os.getloadavg()

        print(f"\n{n}-node no-op DAG, Redis broker, 2 cores")
        header = ("shape", "portal total", "celery total", "portal/node", "celery/node", "overhead/node", "ratio")
        print("{:<9}{:>14}{:>14}{:>13}{:>13}{:>15}{:>8}".format(*header))
        for label, portal_s, celery_s in results:
            overhead = (portal_s - celery_s) / n * 1000
            print(
                f"{label:<9}{portal_s:>12.2f} s{celery_s:>12.2f} s{portal_s / n * 1000:>10.1f} ms"
                f"{celery_s / n * 1000:>10.1f} ms{overhead:>12.1f} ms{portal_s / celery_s:>7.1f}×"
            )
        print("target: overhead ≤ 20 ms per node")
        print("\nCPU per node of the portal's runs (ms)")
        print("{:<9}{:>10}{:>10}{:>10}{:>10}".format("shape", "agent", "worker", "database", "bench"))
        for label, *values in cpu:
            print(f"{label:<9}" + "".join(f"{v:>10.1f}" for v in values))
        loads = " ".join(f"{v:.2f}" for v in load_before), " ".join(f"{v:.2f}" for v in load_after)
        print("load average before: {}, after: {}".format(*loads))
    finally:
        stop(worker, agent)


if __name__ == "__main__":
    main()
