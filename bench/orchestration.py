"""Orchestration overhead: a 200-node no-op DAG through the portal vs a raw Celery chain/group.

Both sides run the same work per node (spawn /bin/true) on the same Redis broker; the portal adds
freezing, dispatch, quotas, the agent, state in the database and status events. Prints per-node
overhead and ratios (target: ≤ 20 ms overhead per node).

    .venv/bin/python bench/orchestration.py [--nodes 200]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override)
"""

from __future__ import annotations

import argparse
import os
import time

from _env import PYTHON, prepare, start, stop, wait_for


def portal_run(pipeline, owner) -> float:
    from apps.jobs.models import PipelineRun
    from apps.jobs.services import start_run

    started = time.perf_counter()
    run = start_run(pipeline, owner)
    wait_for(lambda: PipelineRun.objects.get(pk=run.pk).is_finished, timeout=900, what="portal run")
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
    from tests.factories import UserFactory

    worker = start(
        [PYTHON, "-m", "celery", "-A", "portal", "worker", "--loglevel", "WARNING", "--concurrency", "2",
         "--include", "bench.celery_noop", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        var / "worker.log",
    )  # fmt: skip
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
        results = []
        for label, pipe, raw in (
            ("chain", chain_pipe, lambda: chain(noop.si() for _ in range(n)).apply_async().get(timeout=600)),
            ("fan-out", fan_pipe, lambda: group(noop.si() for _ in range(n)).apply_async().get(timeout=600)),
        ):
            started = time.perf_counter()
            raw()
            celery_s = time.perf_counter() - started
            portal_s = portal_run(pipe, owner)
            results.append((label, portal_s, celery_s))

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
    finally:
        stop(worker, agent)


if __name__ == "__main__":
    main()
