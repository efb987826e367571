"""The portal's main list and detail pages at two sizes of one project: latency and SQL statements (issue 29).

One project seeded straight into the tables (bulk_create, no services): N pipeline runs of three nodes (a task run
each) spread over ten pipelines, N tracking runs in one experiment (5 params, 5 latest metrics with their points, 3
tags each), M registered models of three versions each (every version from a tracking run) plus one model whose
versions grow with M, N/20 datasets of three versions plus one whose versions grow with N, and M/20 inference
services. Every page is fetched with Django's test client as a signed-in member of the project (editor): the whole
request path, middleware and template included. The table prints, per page and size, p50 and p95 of --repeat
fetches, the SQL statements of one fetch, the process's CPU (on SQLite the database's work included) and the
statements' time per fetch, and a floor: the page's main query alone, timed the same way (the first 25 rows of its
list with the count the pager needs, or the row a detail page shows). A page whose statements differ between the two
sizes is flagged: its query count grows with the data (target: constant, p95 < 150 ms at the large size).

    .venv/bin/python bench/pages.py [--sizes 1000,10000] [--models 100,1000] [--repeat 20]
    .venv/bin/python bench/pages.py --small      # 100 and 1,000 runs, 10 and 100 models, 10 fetches
    (BENCH_DATABASE_URL picks the database, PostgreSQL by default, dropped and created again;
     BENCH_DATABASE_URL=sqlite:////tmp/pages.sqlite3 for the embedded default)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

try:
    from bench import _env
except ImportError:  # run as a script: bench/ is on sys.path, the repository root is not yet
    import _env  # type: ignore[no-redef]

NODES = ("prepare", "train", "evaluate")
PARAMS, METRICS, TAGS, POINTS = 5, 5, 3, 3
BATCH = 2000


@dataclass
class World:
    """What the pages are about: the project and the rows the detail pages show."""

    project: object = None
    owner: object = None
    member: object = None
    experiment: object = None
    big_model: object = None
    big_dataset: object = None
    pipelines: list = field(default_factory=list)
    pipeline_runs: int = 0
    tracking_runs: int = 0
    models: int = 0
    datasets: int = 0
    services: int = 0
    ids: dict = field(default_factory=dict)


def seed_base() -> World:
    from apps.datasets.models import Dataset
    from apps.jobs.models import Pipeline
    from apps.models.models import Experiment, RegisteredModel
    from apps.projects.models import Role
    from apps.projects.services import grant_role, provision_project
    from tests.factories import UserFactory

    owner = UserFactory(username="bench-owner")
    member = UserFactory(username="bench-member")
    project = provision_project(owner, slug="bench", name="Bench")
    grant_role(project, member, Role.EDITOR)
    experiment = Experiment.objects.create(project=project, name="bench")
    big_model = RegisteredModel.objects.create(project=project, name="big-model")
    big_dataset = Dataset.objects.create(project=project, name="big-dataset", created_by=owner)
    spec = {"nodes": [{"name": name, "template": "py"} for name in NODES]}
    pipelines = [
        Pipeline.objects.create(project=project, name=f"pipe-{i}", spec=spec, created_by=owner) for i in range(10)
    ]
    return World(project, owner, member, experiment, big_model, big_dataset, pipelines)


def seed_to(world: World, runs: int, models: int) -> None:
    """Add rows until the project holds `runs` pipeline and tracking runs and `models` registered models."""
    from django.utils import timezone

    from apps.datasets.models import Dataset, DatasetVersion
    from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
    from apps.models.models import (
        LatestMetric,
        Metric,
        ModelVersion,
        Param,
        RegisteredModel,
        Run,
        RunTag,
    )
    from apps.serving.models import InferenceService

    now = timezone.now()
    project, owner = world.project, world.owner
    spec = {"nodes": [{"name": name, "template": "py"} for name in NODES]}
    for start in range(world.pipeline_runs, runs, BATCH):
        stop = min(start + BATCH, runs)
        rows = PipelineRun.objects.bulk_create(
            PipelineRun(
                project=project, pipeline=world.pipelines[i % 10], pipeline_name=f"pipe-{i % 10}", number=i + 1,
                spec=spec,
                status=RunStatus.SUCCEEDED, created_by=owner, created_at=now - timedelta(seconds=runs - i),
                started_at=now - timedelta(seconds=runs - i), finished_at=now - timedelta(seconds=runs - i - 1),
            )
            for i in range(start, stop)
        )  # fmt: skip
        TaskRun.objects.bulk_create(
            TaskRun(run=run, node=node, status=TaskStatus.SUCCEEDED, created_at=run.created_at,
                    started_at=run.started_at, finished_at=run.finished_at)
            for run in rows for node in NODES
        )  # fmt: skip
    world.pipeline_runs = runs

    base_ms = int(now.timestamp() * 1000)
    for start in range(world.tracking_runs, runs, BATCH):
        stop = min(start + BATCH, runs)
        rows = Run.objects.bulk_create(
            Run(run_uuid=uuid.uuid4().hex, project=project, experiment=world.experiment, name=f"run-{i}",
                status="FINISHED", start_time=base_ms - (runs - i) * 1000, end_time=base_ms - (runs - i) * 1000 + 500,
                user=owner, artifact_uri=f"mlflow-artifacts:/bench/{i}")
            for i in range(start, stop)
        )  # fmt: skip
        Param.objects.bulk_create(Param(run=r, key=f"p{k}", value=f"v{k}") for r in rows for k in range(PARAMS))
        RunTag.objects.bulk_create(RunTag(run=r, key=f"t{k}", value=f"tag{k}") for r in rows for k in range(TAGS))
        Metric.objects.bulk_create(
            Metric(run=r, key=f"m{k}", value=s / 10, timestamp=base_ms + s, step=s)
            for r in rows for k in range(METRICS) for s in range(POINTS)
        )  # fmt: skip
        LatestMetric.objects.bulk_create(
            LatestMetric(run=r, key=f"m{k}", value=(POINTS - 1) / 10, timestamp=base_ms + POINTS - 1, step=POINTS - 1)
            for r in rows for k in range(METRICS)
        )  # fmt: skip
    world.tracking_runs = runs

    some_runs = list(Run.objects.filter(project=project).values_list("pk", flat=True)[: max(models, 1)])
    new_models = RegisteredModel.objects.bulk_create(
        RegisteredModel(project=project, name=f"model-{i:05d}") for i in range(world.models, models)
    )
    ModelVersion.objects.bulk_create(
        ModelVersion(registered_model=m, version=v, source=f"models:/{m.name}/{v}",
                     run_id=some_runs[(i * 3 + v) % len(some_runs)], user_id_text="bench-owner")
        for i, m in enumerate(new_models) for v in (1, 2, 3)
    )  # fmt: skip
    big_versions = max(models // 10, 1)
    have = ModelVersion.objects.filter(registered_model=world.big_model).count()
    ModelVersion.objects.bulk_create(
        ModelVersion(registered_model=world.big_model, version=v, source=f"models:/big-model/{v}",
                     run_id=some_runs[v % len(some_runs)], user_id_text="bench-owner")
        for v in range(have + 1, big_versions + 1)
    )  # fmt: skip
    world.models = models

    datasets = runs // 20
    new_sets = Dataset.objects.bulk_create(
        Dataset(project=project, name=f"data-{i:05d}", created_by=owner) for i in range(world.datasets, datasets)
    )
    DatasetVersion.objects.bulk_create(
        DatasetVersion(dataset=d, number=n, digest=uuid.uuid4().hex * 2, total_size=1000 * n, file_count=n,
                       created_by=owner, analysis_status="ready")
        for d in new_sets for n in (1, 2, 3)
    )  # fmt: skip
    have = DatasetVersion.objects.filter(dataset=world.big_dataset).count()
    DatasetVersion.objects.bulk_create(
        DatasetVersion(dataset=world.big_dataset, number=n, digest=uuid.uuid4().hex * 2, total_size=n,
                       file_count=1, created_by=owner, analysis_status="ready")
        for n in range(have + 1, runs // 100 + 1)
    )  # fmt: skip
    world.datasets = datasets

    services = max(models // 20, 1)
    versions = list(ModelVersion.objects.filter(registered_model__project=project).select_related("registered_model")
                    .order_by("pk")[: services])  # fmt: skip
    InferenceService.objects.bulk_create(
        InferenceService(project=project, name=f"svc-{i:04d}", registered_model=versions[i].registered_model,
                         model_version=versions[i], status=InferenceService.Status.READY, created_by=owner)
        for i in range(world.services, services)
    )  # fmt: skip
    world.services = services
    pick_detail_rows(world)


def pick_detail_rows(world: World) -> None:
    """The rows the detail pages show: the newest pipeline run, a tracking run, the big model, one of its versions."""
    from apps.datasets.models import DatasetVersion
    from apps.jobs.models import PipelineRun
    from apps.models.models import ModelVersion, Run
    from apps.serving.models import InferenceService

    project = world.project
    world.ids = {
        "run": PipelineRun.objects.filter(project=project).order_by("-number").values_list("pk", flat=True)[0],
        "tracking_run": Run.objects.filter(project=project).order_by("start_time").values_list("pk", flat=True)[0],
        "version": ModelVersion.objects.filter(registered_model=world.big_model).order_by("-version")[0].pk,
        "dataset_version": DatasetVersion.objects.filter(dataset=world.big_dataset).order_by("-number")[0].pk,
        "service": InferenceService.objects.filter(project=project).order_by("pk")[0].pk,
    }


@dataclass
class Page:
    name: str
    url: Callable[[World], str]
    floor: Callable[[World], object]  # the page's main query alone


def pages() -> list[Page]:
    from apps.datasets.models import Dataset, DatasetVersion
    from apps.jobs.models import Pipeline, PipelineRun
    from apps.models.models import Experiment, ModelVersion, RegisteredModel, Run
    from apps.serving.models import InferenceService

    def first_page(qs):
        return qs.count(), list(qs[:25])

    p = "/p/bench"
    runs = lambda w: first_page(PipelineRun.objects.filter(project=w.project))  # noqa: E731
    return [
        Page("project overview", lambda w: f"{p}/", runs),
        Page("pipelines", lambda w: f"{p}/pipelines/",
             lambda w: first_page(Pipeline.objects.filter(project=w.project))),
        Page("pipeline", lambda w: f"{p}/pipelines/{w.pipelines[0].pk}/",
             lambda w: list(PipelineRun.objects.filter(pipeline=w.pipelines[0])[:10])),
        Page("pipeline runs", lambda w: f"{p}/runs/", runs),
        Page("pipeline run", lambda w: f"{p}/runs/{w.ids['run']}/", lambda w: PipelineRun.objects.get(pk=w.ids["run"])),
        Page("experiments", lambda w: f"{p}/experiments/",
             lambda w: first_page(Experiment.objects.filter(project=w.project))),
        Page("experiment (its runs)", lambda w: f"{p}/experiments/{w.experiment.pk}/",
             lambda w: first_page(Run.objects.filter(experiment=w.experiment, lifecycle_stage="active"))),
        Page("tracking run", lambda w: f"{p}/tracking-runs/{w.ids['tracking_run']}/",
             lambda w: Run.objects.get(pk=w.ids["tracking_run"])),
        Page("models", lambda w: f"{p}/models/",
             lambda w: first_page(RegisteredModel.objects.filter(project=w.project))),
        Page("model (big)", lambda w: f"{p}/models/{w.big_model.pk}/",
             lambda w: first_page(ModelVersion.objects.filter(registered_model=w.big_model))),
        Page("model version", lambda w: f"{p}/model-versions/{w.ids['version']}/",
             lambda w: ModelVersion.objects.get(pk=w.ids["version"])),
        Page("datasets", lambda w: f"{p}/datasets/", lambda w: first_page(Dataset.objects.filter(project=w.project))),
        Page("dataset (big)", lambda w: f"{p}/datasets/{w.big_dataset.pk}/",
             lambda w: first_page(DatasetVersion.objects.filter(dataset=w.big_dataset))),
        Page("dataset version", lambda w: f"{p}/dataset-versions/{w.ids['dataset_version']}/",
             lambda w: DatasetVersion.objects.get(pk=w.ids["dataset_version"])),
        Page("services", lambda w: f"{p}/services/",
             lambda w: first_page(InferenceService.objects.filter(project=w.project))),
        Page("service", lambda w: f"{p}/services/{w.ids['service']}/",
             lambda w: InferenceService.objects.get(pk=w.ids["service"])),
        Page("search 'run-1'", lambda w: "/search/?q=run-1",
             lambda w: first_page(Run.objects.filter(project=w.project, name__icontains="run-1"))),
    ]  # fmt: skip


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(p50, p95, CPU p50) in ms of `repeat` calls after one warm-up; the CPU is this process's (the portal's and,
    on SQLite, the database's; PostgreSQL's own is not in it)."""
    call()
    samples, cpu = [], []
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        call()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95, statistics.median(cpu)


def measure(client, world: World, page: Page, repeat: int) -> dict:
    from django.db import connection

    url = page.url(world)

    def fetch():
        response = client.get(url)
        assert response.status_code == 200, f"{url}: {response.status_code} {response.content[:300]!r}"

    fetch()
    statements: list[tuple[float, str]] = []

    def record(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(((time.perf_counter() - started) * 1000, sql))

    # Not CaptureQueriesContext: the request's `reset_queries` empties the log it indexes into.
    with connection.execute_wrapper(record):
        fetch()
    p50, p95, cpu = timed(fetch, repeat)
    floor50, _, _ = timed(lambda: page.floor(world), repeat)
    return {"p50": p50, "p95": p95, "cpu": cpu, "queries": len(statements), "floor": floor50, "sql": statements,
            "sql_ms": sum(ms for ms, _ in statements)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="pipeline runs = tracking runs, small then large")
    parser.add_argument("--models", default="100,1000", help="registered models, small then large")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="--sizes 100,1000 --models 10,100 --repeat 10")
    parser.add_argument("--show-sql", action="store_true", help="print each page's statements at the large size")
    parser.add_argument("--only", default="", help="the pages whose name contains this")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of each page (large)")
    args = parser.parse_args()
    if args.small:
        args.sizes, args.models, args.repeat = "100,1000", "10,100", 10
    sizes = [int(s) for s in args.sizes.split(",")]
    model_sizes = [int(s) for s in args.models.split(",")]
    assert len(sizes) == len(model_sizes) == 2, "two sizes, small then large"
    _env.prepare("pages")

    from django.conf import settings
    from django.db import connection
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    world = seed_base()
    client = Client()
    client.force_login(world.member)
    results: list[dict[str, dict]] = []
    for runs, models in zip(sizes, model_sizes, strict=True):
        started = time.perf_counter()
        seed_to(world, runs, models)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        print(f"seeded {runs} pipeline runs, {runs} tracking runs, {models} models in "
              f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
        chosen = [page for page in pages() if args.only in page.name]
        results.append({page.name: measure(client, world, page, args.repeat) for page in chosen})

    small, large = results
    load = os.getloadavg()
    print(f"\nPages of one project ({connection.vendor}), p50/p95 of {args.repeat} fetches as a signed-in member; "
          f"CPU = this process's CPU per fetch (p50); SQL = the statements' time in one fetch; "
          f"floor = the page's main query alone (p50); load average {load[0]:.1f}")  # fmt: skip
    print(f"sizes: {sizes[0]} / {sizes[1]} pipeline and tracking runs, {model_sizes[0]} / {model_sizes[1]} models\n")
    head = f"| page | queries {sizes[0]} | queries {sizes[1]} | p50 / p95 ms {sizes[0]} | p50 / p95 ms {sizes[1]} "
    print(head + "| CPU ms (large) | SQL ms (large) | floor ms (large) | |")
    print("|---|---|---|---|---|---|---|---|---|")
    grows = []
    for name in small:
        a, b = small[name], large[name]
        flags = []
        if b["queries"] != a["queries"]:
            flags.append("queries grow")
            grows.append(name)
        if b["p95"] > 150:
            flags.append("p95 > 150")
        print(f"| {name} | {a['queries']} | {b['queries']} | {a['p50']:.1f} / {a['p95']:.1f} | "
              f"{b['p50']:.1f} / {b['p95']:.1f} | {b['cpu']:.1f} | {b['sql_ms']:.1f} | {b['floor']:.1f} | "
              f"{', '.join(flags)} |")  # fmt: skip
    worst = max(large.values(), key=lambda r: r["p95"])["p95"]
    print(f"\nworst p95 at {sizes[1]}: {worst:.1f} ms (target < 150); pages whose queries grow: {len(grows)}")
    if args.profile:
        import cProfile
        import pstats

        for page in chosen:
            profile = cProfile.Profile()
            url = page.url(world)
            profile.runcall(lambda url=url: [client.get(url) for _ in range(5)])
            print(f"\n-- {page.name} (5 fetches):")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    if args.show_sql:
        for name, result in large.items():
            print(f"\n-- {name}:")
            for ms, sql in result["sql"]:
                print(f"  {ms:7.1f} ms  {sql[:400]}")


if __name__ == "__main__":
    main()
