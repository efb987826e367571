"""Experiment tracking side by side with MLflow's own server, driven by the same official-client script.

(a) 20 runs × 50 metrics × 200 steps via log_batch   (b) 1000 single log_metric calls
(c) get_metric_history of a 100k-point metric          (d) search_runs "metrics.m1 > 0.5" over 5k runs

Both servers run on loopback with the same kind of database (SQLite by default; --db postgres for
PostgreSQL, which needs psycopg in the MLflow venv), one after the other, so they never share the 2 cores.
The portal is served as `make run` serves it (uvicorn, one process); MLflow as `mlflow server` starts
by default. Prints each figure and the ratio (targets ≥ 3× on a, b, d and ≥ 5× on c).

    .venv/bin/python bench/tracking.py [--db sqlite|postgres] [--search-runs 5000] [--history 100000]
    (creates .venv-mlflow with `make mlflow-env` when missing)
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
import json, random, sys, time
from concurrent.futures import ThreadPoolExecutor
import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric

search_runs, history_points = int(sys.argv[1]), int(sys.argv[2])
client = MlflowClient()
out = {}

def batches(run_id, points):
    for start in range(0, len(points), 1000):
        client.log_batch(run_id, metrics=points[start:start + 1000])

# (a) 20 runs x 50 metrics x 200 steps, log_batch of 1000
exp_a = client.create_experiment("bench-a")
now = int(time.time() * 1000)
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

# (d) search over N runs (created untimed, 8 client threads), read 3 times
exp_d = client.create_experiment("bench-d")
def make(i):
    run = client.create_run(exp_d)
    client.log_batch(run.info.run_id, metrics=[Metric("m1", random.random(), now, 0), Metric("m2", 1.0, now, 0)])
with ThreadPoolExecutor(8) as pool:
    list(pool.map(make, range(search_runs)))
times = []
for _ in range(3):
    started = time.perf_counter()
    found = client.search_runs([exp_d], "metrics.m1 > 0.5", max_results=search_runs)
    times.append(time.perf_counter() - started)
out["d_found"] = len(found)
out["d_seconds"] = sorted(times)[1]
print(json.dumps(out))
"""


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


def run_client(url: str, token: str | None, script: Path, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DJANGO_", "DATABASE_URL"))}
    env.update(MLFLOW_TRACKING_URI=url, GIT_PYTHON_REFRESH="quiet")
    if token:
        env["MLFLOW_TRACKING_TOKEN"] = token
    result = subprocess.run(
        [str(MLFLOW_PY), str(script), str(args.search_runs), str(args.history)],
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
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, log)
        return run_client(f"http://127.0.0.1:{port}", token, script, args)
    finally:
        stop(proc)


def bench_mlflow(args: argparse.Namespace, work: Path, script: Path) -> dict:
    if args.db == "sqlite":
        store = f"sqlite:///{work / 'mlflow.sqlite3'}"
    else:
        import psycopg

        base = os.environ.get("BENCH_MLFLOW_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "mlflow_bench" WITH (FORCE)')
            conn.execute('CREATE DATABASE "mlflow_bench"')
        store = f"{base}/mlflow_bench"
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
        return run_client(f"http://127.0.0.1:{port}", None, script, args)
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--search-runs", type=int, default=5000)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--only", choices=["portal", "mlflow"], help="run one side (for profiling)")
    args = parser.parse_args()
    if not MLFLOW_PY.exists():
        subprocess.run(["make", "mlflow-env"], cwd=ROOT, check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    script = work / "client.py"
    script.write_text(CLIENT)
    try:
        results = {}
        if args.only != "mlflow":
            results["portal"] = bench_portal(args, work, script)
            print("portal:", json.dumps(results["portal"]), flush=True)
        if args.only != "portal":
            results["mlflow"] = bench_mlflow(args, work, script)
            print("mlflow:", json.dumps(results["mlflow"]), flush=True)
        if len(results) == 2:
            p, m = results["portal"], results["mlflow"]
            a, b = p["a_metrics_per_s"], m["a_metrics_per_s"]
            c, d = p["b_calls_per_s"], m["b_calls_per_s"]
            rows = [
                ("(a) log_batch 20×50×200", "metrics/s", a, b, a / b, 3),
                ("(b) 1000 log_metric", "calls/s", c, d, c / d, 3),
                (
                    f"(c) history {args.history} pts",
                    "s",
                    p["c_seconds"],
                    m["c_seconds"],
                    m["c_seconds"] / p["c_seconds"],
                    5,
                ),
                (
                    f"(d) search {args.search_runs} runs",
                    "s",
                    p["d_seconds"],
                    m["d_seconds"],
                    m["d_seconds"] / p["d_seconds"],
                    3,
                ),
            ]
            print(f"\n{'work':28} {'unit':10} {'portal':>12} {'mlflow':>12} {'ratio':>8}  target  ({args.db})")
            for name, unit, ours, theirs, ratio, target in rows:
                flag = "ok" if ratio >= target else "BELOW"
                print(f"{name:28} {unit:10} {ours:12.3f} {theirs:12.3f} {ratio:7.1f}×  ≥{target}× {flag}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
