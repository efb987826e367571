"""Experiment tracking side by side with MLflow's own server, driven by the same official-client script.

(a) 20 runs × 50 metrics × 200 steps via log_batch   (b) 1000 single log_metric calls
(c) get_metric_history of a 100k-point metric          (d) search_runs "metrics.m1 > 0.5" over 5k runs

Floors and curves printed beside them (issue #29): (b) against an empty server (uvicorn answering {} at once:
the client alone); (c) through a plain HTTP client too (the server's share, without the client's protobuf
parsing); (d) on the portal over experiments of `--grow` runs seeded straight into the database (a 1,000-run
page through the client, and every match through plain HTTP, per run); (d) also through a plain HTTP client, and
the official client's parsing of that same body alone (json, protobuf ParseDict, Run.from_proto): its floor.

Both servers run on loopback with the same kind of database (SQLite by default; --db postgres for
PostgreSQL; the MLflow venv has psycopg for it), one after the other, so they never share the 2 cores.
The portal is served as `make run` serves it (uvicorn, one process); MLflow as `mlflow server` starts
by default. Prints each figure with its peer or floor and the issue's target.

    .venv/bin/python bench/tracking.py [--db sqlite|postgres] [--search-runs 5000] [--history 100000]
        [--grow 5000 100000] [--only portal|mlflow] [--part all|search]
    --part search: (d) and the growth curve only, on both sides (BENCH_MLFLOW_DB names MLflow's PostgreSQL
    database, mlflow_bench by default; BENCH_DATABASE_URL the portal's, as for every bench)
    (runs `make mlflow-env` first: builds .venv-mlflow or brings it up to date)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MLFLOW_VENV = ROOT / ".venv-mlflow"
MLFLOW_PY = MLFLOW_VENV / "bin" / "python"

CLIENT = r"""
import json, os, random, sys, time
from concurrent.futures import ThreadPoolExecutor
import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric

mode = sys.argv[1]
client = MlflowClient()
out = {}

def raw_request(method, path, body=None):
    # (seconds to the last byte, body) of a request through a plain HTTP client (no protobuf parsing): the
    # server's share; a POST sends `body` as JSON, as the official client sends search
    import http.client, os, urllib.parse
    url = urllib.parse.urlsplit(os.environ["MLFLOW_TRACKING_URI"])
    conn = http.client.HTTPConnection(url.hostname, url.port)
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    started = time.perf_counter()
    conn.request(method, path, body, headers)
    response = conn.getresponse()
    payload = response.read()
    assert response.status == 200, payload[:300]
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed, payload

def raw_get(path):
    return raw_request("GET", path)

def raw_post(path, body):
    return raw_request("POST", path, body)

if mode == "floor":  # the client alone: log_metric, then log_batch, against a server that answers {} at once
    started = time.perf_counter()
    for i in range(1000):
        client.log_metric("0" * 32, "single", i * 0.5, step=i)
    out["floor_calls_per_s"] = 1000 / (time.perf_counter() - started)
    now = int(time.time() * 1000)  # (a) as below, the client's own work: building and sending 200 batches
    started = time.perf_counter()
    for r in range(20):
        points = [Metric(f"m{k}", random.random(), now + s, s) for s in range(200) for k in range(50)]
        for start in range(0, len(points), 1000):
            client.log_batch("0" * 32, metrics=points[start:start + 1000])
    out["floor_batch_metrics_per_s"] = 20 * 50 * 200 / (time.perf_counter() - started)
    print(json.dumps(out))
    sys.exit(0)

if mode == "search":  # search_runs over an experiment seeded by the bench: one page, then every match (raw)
    exp, expected = sys.argv[2], int(sys.argv[3])
    times = []
    for _ in range(3):
        started = time.perf_counter()
        found = client.search_runs([exp], "metrics.m1 > 0.5", max_results=1000)
        times.append(time.perf_counter() - started)
    out["page_found"], out["page_seconds"] = len(found), sorted(times)[1]
    import urllib.parse
    query = urllib.parse.urlencode({"experiment_ids": exp, "filter": "metrics.m1 > 0.5", "max_results": 50000})
    raw = sorted(raw_get(f"/api/2.0/mlflow/runs/search?{query}")[0] for _ in range(3))
    out["all_raw_seconds"] = raw[1]
    print(json.dumps(out))
    sys.exit(0)

search_runs, history_points = int(sys.argv[2]), int(sys.argv[3])
now = int(time.time() * 1000)

def batches(run_id, points):
    for start in range(0, len(points), 1000):
        client.log_batch(run_id, metrics=points[start:start + 1000])

def part_a_to_c():
    # (a) 20 runs x 50 metrics x 200 steps, log_batch of 1000
    exp_a = client.create_experiment("bench-a")
    started = time.perf_counter()
    for r in range(20):
        run = client.create_run(exp_a)
        points = [Metric(f"m{k}", random.random(), now + s, s) for s in range(200) for k in range(50)]
        batches(run.info.run_id, points)
        client.set_terminated(run.info.run_id)
    out["a_seconds"] = time.perf_counter() - started
    out["a_metrics_per_s"] = 20 * 50 * 200 / out["a_seconds"]

    # (b) 1000 single log_metric calls
    run_b = client.create_run(exp_a)
    started = time.perf_counter()
    for i in range(1000):
        client.log_metric(run_b.info.run_id, "single", i * 0.5, step=i)
    out["b_seconds"] = time.perf_counter() - started
    out["b_calls_per_s"] = 1000 / out["b_seconds"]

    # (c) history of a 100k-point metric (logged untimed), read 3 times
    run_c = client.create_run(exp_a)
    batches(run_c.info.run_id, [Metric("long", float(i), now + i, i) for i in range(history_points)])
    times = []
    for _ in range(3):
        started = time.perf_counter()
        history = client.get_metric_history(run_c.info.run_id, "long")
        times.append(time.perf_counter() - started)
        assert len(history) == history_points, len(history)
    out["c_seconds"] = sorted(times)[1]
    query = f"run_id={run_c.info.run_id}&metric_key=long"
    out["c_raw_seconds"] = sorted(raw_get(f"/api/2.0/mlflow/metrics/get-history?{query}")[0] for _ in range(3))[1]

# (d) search over N runs (created untimed, 8 client threads), read 3 times
def part_d(search_runs):
    exp_d = client.create_experiment("bench-d")
    def make(i):
        run = client.create_run(exp_d)
        client.log_batch(run.info.run_id, metrics=[Metric("m1", random.random(), now, 0), Metric("m2", 1.0, now, 0)])
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(search_runs)))
    if os.environ.get("BENCH_ANALYZE_DSN"):
        # PostgreSQL: the planner's statistics as autovacuum would have them by now (on servers where it is off,
        # both sides would otherwise plan (d) for the empty tables they started with)
        import psycopg
        with psycopg.connect(os.environ["BENCH_ANALYZE_DSN"], autocommit=True) as conn:
            conn.execute("ANALYZE")
    times = []
    for _ in range(3):
        started = time.perf_counter()
        found = client.search_runs([exp_d], "metrics.m1 > 0.5", max_results=search_runs)
        times.append(time.perf_counter() - started)
    out["d_found"] = len(found)
    out["d_seconds"] = sorted(times)[1]
    out["d_experiment"] = exp_d
    # The client's own share: the same request through a plain HTTP client (the server's share), and the parsing
    # the official client does of that body (json, protobuf ParseDict, Run.from_proto), with no server at all.
    body = json.dumps({"experiment_ids": [exp_d], "filter": "metrics.m1 > 0.5", "max_results": search_runs})
    raw = sorted(raw_post("/api/2.0/mlflow/runs/search", body) for _ in range(3))
    out["d_raw_seconds"], payload = raw[1]
    from mlflow.entities import Run
    from mlflow.protos.service_pb2 import SearchRuns
    from mlflow.utils.proto_json_utils import parse_dict
    parse = []
    for _ in range(3):
        started = time.perf_counter()
        message = SearchRuns.Response()
        parse_dict(js_dict=json.loads(payload), message=message)
        assert len([Run.from_proto(r) for r in message.runs]) == len(found)
        parse.append(time.perf_counter() - started)
    out["d_client_parse_seconds"] = sorted(parse)[1]

if mode == "search-part":
    part_d(search_runs)
    print(json.dumps(out))
    sys.exit(0)

part_a_to_c()
part_d(search_runs)
print(json.dumps(out))
"""


MODES = {"all": "full", "search": "search-part"}  # --part → the client script's mode


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # answering, even if 4xx
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer:\n{log.read_text()[-3000:]}")


def run_client(url: str, token: str | None, script: Path, *argv: object, analyze: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_", "DATABASE_URL"))}
    env.update(MLFLOW_TRACKING_URI=url, GIT_PYTHON_REFRESH="quiet", BENCH_ANALYZE_DSN=analyze)
    if token:
        env["MLFLOW_TRACKING_TOKEN"] = token
    result = subprocess.run(
        [str(MLFLOW_PY), str(script), *map(str, argv)],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"client failed against {url}:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def bench_portal(args: argparse.Namespace, work: Path, script: Path) -> dict:
    if args.db == "sqlite":
        os.environ["BENCH_DATABASE_URL"] = f"sqlite:///{work / 'portal.sqlite3'}"
    sys.path.insert(0, str(ROOT / "bench"))
    from _env import prepare

    var = prepare("tracking")
    os.environ["MEDIA_ROOT"] = str(work / "portal-media")
    from apps.accounts.services import create_token
    from apps.projects.services import create_project
    from tests.factories import UserFactory

    owner = UserFactory(username="bench")
    project = create_project(owner, slug="bench", name="Bench")
    token = create_token(owner, name="bench", project=project)[1]
    port = free_port()
    log = var / "uvicorn.log"
    env = {**os.environ, "DB_CONN_MAX_AGE": "300"}
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "uvicorn"), "portal.asgi:application", "--host", "127.0.0.1", "--port",
         str(port), "--no-server-header", "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, log, timeout=300)
        url = f"http://127.0.0.1:{port}"
        analyze = os.environ["DATABASE_URL"] if args.db == "postgres" else ""
        result = run_client(url, token, script, MODES[args.part], args.search_runs, args.history, analyze=analyze)
        for runs in args.grow:  # the growth curve: more runs seeded straight into the database (untimed)
            experiment = seed_runs(project, owner, runs)
            found = run_client(url, token, script, "search", experiment, runs)
            result[f"grow_{runs}"] = found
        return result
    finally:
        stop(proc)


EMPTY_SERVER = r"""
import sys
import uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def bench_floor(work: Path, script: Path) -> dict:
    """The official client's log_metric and log_batch against a server that answers {} at once (uvicorn, same
    machine): what the client alone costs."""
    server = work / "empty_server.py"
    server.write_text(EMPTY_SERVER)
    port = free_port()
    log = work / "empty.log"
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), str(server), str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", proc, log)
        return run_client(f"http://127.0.0.1:{port}", "floor", script, "floor")
    finally:
        stop(proc)


def seed_runs(project, owner, count: int) -> str:
    """An experiment of `count` runs with metrics m1 (random) and m2 (1.0), as the client's (d) makes them, written
    in bulk (the client would take minutes); returns its id."""
    import random
    import uuid

    from django.db import connection

    from apps.models import services
    from apps.models.models import LatestMetric, Run

    experiment = services.create_experiment(project, f"grow-{count}")
    now = int(time.time() * 1000)
    for start in range(0, count, 5000):
        runs = [
            Run(
                run_uuid=uuid.uuid4().hex, project=project, experiment=experiment, name=f"r{i}", start_time=now + i,
                user=owner, user_id_text=owner.username, artifact_uri=f"mlflow-artifacts:/{experiment.pk}/{i}",
            )
            for i in range(start, min(count, start + 5000))
        ]  # fmt: skip
        Run.objects.bulk_create(runs)
        LatestMetric.objects.bulk_create(
            LatestMetric(run=run, key=key, value=value, timestamp=now, step=0)
            for run in runs
            for key, value in (("m1", random.random()), ("m2", 1.0))
        )
    # What autovacuum's analyze does within a minute of such growth; without it the planner still sees the tables
    # as they were before the bulk insert (a client logging runs one by one leaves it time to catch up).
    with connection.cursor() as cursor:
        for model in (Run, LatestMetric):
            cursor.execute(f"ANALYZE {model._meta.db_table}")
    return str(experiment.pk)


def bench_mlflow(args: argparse.Namespace, work: Path, script: Path) -> dict:
    name = os.environ.get("BENCH_MLFLOW_DB", "mlflow_bench")  # sessions sharing a server each need their own
    if args.db == "sqlite":
        store = f"sqlite:///{work / 'mlflow.sqlite3'}"
    else:
        import psycopg

        base = os.environ.get("BENCH_MLFLOW_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        store = f"{base}/{name}"
    port = free_port()
    log = work / "mlflow.log"
    env = {**os.environ, "PATH": f"{MLFLOW_VENV / 'bin'}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [str(MLFLOW_VENV / "bin" / "mlflow"), "server", "--backend-store-uri", store, "--artifacts-destination",
         str(work / "mlflow-artifacts"), "--host", "127.0.0.1", "--port", str(port)],
        cwd=work, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, log, timeout=300)
        analyze = f"postgres://postgres@127.0.0.1:5432/{name}" if args.db == "postgres" else ""
        url = f"http://127.0.0.1:{port}"
        return run_client(url, None, script, MODES[args.part], args.search_runs, args.history, analyze=analyze)
    finally:
        stop(proc)


def report(args: argparse.Namespace, results: dict) -> None:
    """The issue's rows: each figure with its peer (MLflow) or floor from this run, and the target."""
    p, m, f = results.get("portal"), results.get("mlflow"), results.get("floor")
    print(f"\n{'path':34} {'portal':>12} {'mlflow':>10} {'ratio':>7}  {'floor / other':24} target  ({args.db})")

    def row(name: str, ours: float, theirs: float | None, ratio: float | None, other: str, target: str, ok: bool):
        peer = f"{theirs:10.3f}" if theirs is not None else f"{'—':>10}"
        times = f"{ratio:6.1f}×" if ratio is not None else f"{'':7}"
        print(f"{name:34} {ours:12.3f} {peer} {times}  {other:24} {target} {'ok' if ok else 'BELOW'}")

    if p is None:
        return
    if "b_calls_per_s" in p:
        report_a_to_c(args, p, m, f, row)
    d = p["d_seconds"]
    ratio = m and m["d_seconds"] / d
    row(f"search_runs {args.search_runs} runs (s)", d, m and m["d_seconds"], ratio, f"{p['d_found']} found",
        "≥ 5×", bool(ratio and ratio >= 5))  # fmt: skip
    for side, r in (("portal", p), ("mlflow", m)):
        if r and "d_raw_seconds" in r:
            print(f"  {side}: raw HTTP {r['d_raw_seconds']:.3f} s, the client's parsing of that body "
                  f"{r['d_client_parse_seconds']:.3f} s")  # fmt: skip
    for runs in args.grow:
        g = p[f"grow_{runs}"]
        row(f"search_runs {runs} runs, 1k page (s)", g["page_seconds"], None, None,
            f"all matches raw {g['all_raw_seconds']:.2f} s", "≤ 1 s", g["page_seconds"] <= 1)  # fmt: skip
    print("search growth (raw HTTP, every match, max_results 50000): ", end="")
    for runs in args.grow:
        g = p[f"grow_{runs}"]
        print(f"{runs} runs {g['all_raw_seconds']:.2f} s ({g['all_raw_seconds'] / runs * 1e6:.1f} µs/run)  ", end="")
    print()


def report_a_to_c(args: argparse.Namespace, p: dict, m: dict | None, f: dict | None, row) -> None:
    floor = f["floor_calls_per_s"] if f else None
    b = p["b_calls_per_s"]
    row("single log_metric (calls/s)", b, m and m["b_calls_per_s"], m and b / m["b_calls_per_s"],
        f"empty server {floor:.0f}/s" if floor else "", "≥ 300/s", b >= 300)  # fmt: skip
    a = p["a_metrics_per_s"]
    floor = f and f.get("floor_batch_metrics_per_s")
    row("log_batch 20×50×200 (metrics/s)", a, m and m["a_metrics_per_s"], m and a / m["a_metrics_per_s"],
        f"empty server {floor / 1000:.1f}k/s" if floor else "", "≥ 40k/s", a >= 40_000)  # fmt: skip
    c, raw = p["c_seconds"], p["c_raw_seconds"]
    ratio = m and m["c_seconds"] / c
    row(f"history {args.history} pts, e2e (s)", c, m and m["c_seconds"], ratio, f"raw HTTP {raw:.3f} s",
        "server ≤ 0.15 s, ≥ 5×", raw <= 0.15 and bool(ratio and ratio >= 5))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--search-runs", type=int, default=5000)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--grow", type=int, nargs="*", default=[5000, 100_000], help="runs of the search curve")
    parser.add_argument("--only", choices=["portal", "mlflow"], help="run one side (for profiling)")
    parser.add_argument(
        "--part",
        choices=list(MODES),
        default="all",
        help="search: only (d) and the --grow curve (both sides), not (a)-(c) nor the empty server",
    )
    args = parser.parse_args()
    # Builds .venv-mlflow when missing and brings it up to its requirements (a venv built before psycopg was in
    # them could not start `mlflow server` on PostgreSQL, and said so only after the portal's half of the run).
    subprocess.run(["make", "--quiet", "mlflow-env"], cwd=ROOT, check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    script = work / "client.py"
    script.write_text(CLIENT)
    try:
        results = {"floor": bench_floor(work, script)} if args.part == "all" else {}
        if "floor" in results:
            print("floor:", json.dumps(results["floor"]), flush=True)
        if args.only != "mlflow":
            results["portal"] = bench_portal(args, work, script)
            print("portal:", json.dumps(results["portal"]), flush=True)
        if args.only != "portal":
            results["mlflow"] = bench_mlflow(args, work, script)
            print("mlflow:", json.dumps(results["mlflow"]), flush=True)
        report(args, results)
        print(f"load average: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
