"""MLflow runs/search time against the number of AND clauses in its filter (issue 27's query of death).

One experiment of --runs runs, each with 20 params, 20 latest metrics and 20 tags, written straight to the
tables; then `runs/search` through the portal's MLflow API (Django's test client, a read-only token, the whole
request path) with filters of 10, 100, 200 and 400 clauses cycling over params, metrics and tags (every clause
true for every run, so no clause can cut the work short). Prints the median of --repeat calls per size and the
growth ratio between consecutive sizes next to the clause ratio: linear cost keeps them close. Before the fix,
one EXISTS per clause took 1.8 s at 100 clauses, 10.8 s at 200 and over 50 s at 400 on PostgreSQL.

    .venv/bin/python bench/search.py [--runs 1000] [--repeat 3] [--sizes 10,100,200,400]
    (BENCH_DATABASE_URL picks the database, PostgreSQL by default; it is dropped and created again)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

try:
    from bench import _env
except ImportError:  # run as a script: bench/ is on sys.path, the repository root is not yet
    import _env  # type: ignore[no-redef]

KEYS = 20


def populate(runs: int) -> tuple[str, str]:
    """(experiment id, read-only token) of an experiment holding `runs` runs."""
    from apps.accounts.models import ApiToken
    from apps.accounts.services import create_token
    from apps.models.models import Experiment, LatestMetric, Param, Run, RunTag
    from apps.projects.services import provision_project
    from tests.factories import UserFactory

    user = UserFactory(username="bench")
    project = provision_project(user, slug="bench", name="Bench")
    experiment = Experiment.objects.create(project=project, name="search")
    rows = Run.objects.bulk_create(
        Run(run_uuid=uuid.uuid4().hex, project=project, experiment=experiment, name=f"r{i}", start_time=i)
        for i in range(runs)
    )
    Param.objects.bulk_create(Param(run=run, key=f"p{k}", value=f"value-{k}") for run in rows for k in range(KEYS))
    RunTag.objects.bulk_create(RunTag(run=run, key=f"t{k}", value=f"tag-{k}") for run in rows for k in range(KEYS))
    LatestMetric.objects.bulk_create(
        LatestMetric(run=run, key=f"m{k}", value=k, timestamp=0, step=0) for run in rows for k in range(KEYS)
    )
    token = create_token(user, name="bench", scope=ApiToken.Scope.READ)[1]
    return str(experiment.pk), token


def clause(i: int) -> str:
    k = i % KEYS
    return [f"params.p{k} LIKE 'value-%'", f"metrics.m{k} > {-1 - i}", f"tags.t{k} != 'no-{i}'"][i % 3]


def search(client, token: str, experiment_id: str, clauses: int, runs: int) -> float:
    body = {"experiment_ids": [experiment_id], "max_results": runs, "filter": " AND ".join(map(clause, range(clauses)))}
    started = time.perf_counter()
    response = client.post(
        "/api/2.0/mlflow/runs/search", json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.content[:500]
    assert len(response.json()["runs"]) == runs, "every clause is true for every run"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="10,100,200,400")
    args = parser.parse_args()
    _env.prepare("search")

    from django.conf import settings
    from django.db import connection
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    experiment_id, token = populate(args.runs)
    client = Client()
    search(client, token, experiment_id, 1, args.runs)  # warm up
    print(f"runs/search over {args.runs} runs ({connection.vendor}), median of {args.repeat}:")
    previous: tuple[int, float] | None = None
    for size in (int(s) for s in args.sizes.split(",")):
        seconds = statistics.median(search(client, token, experiment_id, size, args.runs) for _ in range(args.repeat))
        line = f"  {size:4d} clauses: {seconds:8.3f} s"
        if previous:
            line += f"   ×{seconds / previous[1]:.2f} time for ×{size / previous[0]:.2f} clauses"
        print(line, flush=True)
        previous = (size, seconds)


if __name__ == "__main__":
    main()
