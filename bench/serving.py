"""Model serving side by side: one iris LogisticRegression (trained once, saved once with mlflow.sklearn) served
by the portal's model server (`direct`), through the portal's router (`portal`), by `mlflow models serve`
(`mlflow`) and by MLServer (`mlserver`, when .venv-mlserver exists: `make mlserver-env`). Each is loaded by wrk,
64 connections for a fixed time, with 1-row and 32-row requests; prints req/s, p50, p99 and the ratios against
MLflow (targets: ≥ 3× req/s, p99 ≤ ½), plus the latency of sequential requests on one keep-alive connection (the
~40 ms Nagle/delayed-ACK stall shows there), and the router's own overhead (portal p50 − direct p50).

`portal` sets a portal up itself (bench/_serving_portal.py): a fresh PostgreSQL database and Redis prefix, the
same saved model registered as a model version, an inference service with --workers replicas (one model-server
process each, as many processes as the other targets get), and the processes the Procfile runs (uvicorn, the
local agent, a Celery worker and beat); requests go through `/serving/bench/iris/…` with a project token. With
--portal-url (and --portal-token) it calls an existing portal instead.

Servers run one at a time. On a machine with 2+ cores the server is pinned to CPU 0 and wrk to CPU 1 (with
--workers 1), so the load generator never competes with the server; for `portal` every portal process (router,
replicas, agent, worker, beat) is on CPU 0. wrk's own CPU use is printed to show it was not the bottleneck. Other
processes on the machine still add noise: the load average is printed.

    .venv/bin/python bench/serving.py [--targets direct,portal,mlflow,mlserver] [--duration 10] [--connections 64]
        [--workers 1] [--rows 1,32] [--portal-url http://127.0.0.1:8000/serving/<project>/<service>
        --portal-token TOKEN] [--json results.json]
    (needs wrk: apt-get install -y wrk; creates .venv-mlflow with `make mlflow-env` when missing; `portal` needs
    PostgreSQL and Redis on 127.0.0.1, BENCH_DATABASE_URL / BENCH_REDIS_URL override)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from _env import cpu_seconds
from _serving_images import bench_images, report_images
from _serving_portal import running_portal

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
MLFLOW_VENV = ROOT / ".venv-mlflow"
MLSERVER_VENV = ROOT / ".venv-mlserver"
FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]

TRAIN = textwrap.dedent(
    """
    import json, sys
    import joblib, mlflow.sklearn
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    out = sys.argv[1]
    x, y = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=500).fit(x, y)
    mlflow.sklearn.save_model(model, f"{out}/mlflow-model")
    joblib.dump(model, f"{out}/model.joblib")  # the same estimator for MLServer's sklearn runtime
    json.dump({"x": x.tolist(), "predict": model.predict(x).tolist()}, open(f"{out}/iris.json", "w"))
    """
)


@dataclass
class Target:
    """How to start one server and talk to it."""

    name: str
    url: str  # the inference endpoint
    ready_url: str
    body: object  # rows -> JSON body
    parse: object  # response JSON -> predicted labels
    command: list[str] = field(default_factory=list)  # empty: already running (portal)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    headers: dict[str, str] = field(default_factory=dict)
    watch: dict[str, list[int]] = field(default_factory=dict)  # processes whose CPU per request is reported


def oip_body(rows: list[list[float]]) -> dict:
    return {"inputs": [{"name": "input-0", "shape": [len(rows), 4], "datatype": "FP64", "data": rows}]}


def oip_labels(answer: dict) -> list:
    return next(o for o in answer["outputs"] if o["name"] == "predict")["data"]


def mlflow_body(rows: list[list[float]]) -> dict:
    return {"dataframe_split": {"columns": FEATURES, "data": rows}}


def mlflow_labels(answer: dict) -> list:
    return answer["predictions"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def targets(args: argparse.Namespace, work: Path) -> dict[str, Target]:
    workers = str(args.workers)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    found = {
        "direct": Target(
            "direct", f"{base}/v2/models/iris/infer", f"{base}/v2/models/iris/ready", oip_body, oip_labels,
            [str(PYTHON), "-m", "apps.serving.modelserver", "--name", "iris", "--model", str(work / "mlflow-model"),
             "--port", str(port), "--workers", workers, *args.server_args.split()],
            cwd=ROOT,
        ),
        "mlflow": Target(
            "mlflow", f"{base}/invocations", f"{base}/ping", mlflow_body, mlflow_labels,
            [str(MLFLOW_VENV / "bin" / "mlflow"), "models", "serve", "-m", str(work / "mlflow-model"), "--env-manager",
             "local", "-h", "127.0.0.1", "-p", str(port), "-w", workers],
            # `mlflow models serve` starts uvicorn from PATH: its own venv's
            env={"PATH": f"{MLFLOW_VENV / 'bin'}:{os.environ['PATH']}"}, cwd=work,
        ),
    }  # fmt: skip
    if (MLSERVER_VENV / "bin" / "mlserver").exists():
        folder = work / "mlserver"
        folder.mkdir(exist_ok=True)
        workers = args.workers if args.mlserver_parallel_workers is None else args.mlserver_parallel_workers
        settings = {"http_port": port, "grpc_port": free_port(), "metrics_port": free_port(), "host": "127.0.0.1",
                    "parallel_workers": workers, "debug": False}  # fmt: skip
        (folder / "settings.json").write_text(json.dumps(settings))
        model = {"name": "iris", "implementation": "mlserver_sklearn.SKLearnModel",
                 "parameters": {"uri": str(work / "model.joblib"), "version": "1"}}  # fmt: skip
        if args.mlserver_batching:  # its adaptive batching, off by default, set like ours (32 requests, 2 ms)
            model.update(max_batch_size=32, max_batch_time=0.002)
        (folder / "model-settings.json").write_text(json.dumps(model))
        found["mlserver"] = Target(
            "mlserver", f"{base}/v2/models/iris/infer", f"{base}/v2/models/iris/ready", oip_body, oip_labels,
            [str(MLSERVER_VENV / "bin" / "mlserver"), "start", str(folder)],
            env={"PATH": f"{MLSERVER_VENV / 'bin'}:{os.environ['PATH']}"}, cwd=folder,
        )  # fmt: skip
    if args.portal_url:  # an existing portal; without it the portal target sets one up (bench_portal)
        headers = {"Authorization": f"Bearer {args.portal_token}"} if args.portal_token else {}
        found["portal"] = portal_target(args.portal_url, headers)
    return found


def post(url: str, body: dict, headers: dict[str, str]) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_ready(target: Target, proc: subprocess.Popen | None, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{target.name} exited:\n{log.read_text()[-3000:]}")
        try:
            request = urllib.request.Request(target.ready_url, headers=target.headers)
            urllib.request.urlopen(request, timeout=2)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise TimeoutError(f"{target.name} did not get ready:\n{log.read_text()[-3000:] if log.exists() else ''}")


def cpu_sets(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """taskset prefixes for (server, wrk): separate cores when there are two and the server is one process."""
    if args.no_pin or args.workers != 1 or (os.cpu_count() or 1) < 2 or not shutil.which("taskset"):
        return [], []
    return ["taskset", "-c", "0"], ["taskset", "-c", "1"]


def run_wrk(target: Target, rows: list[list[float]], args: argparse.Namespace, pin: list[str], work: Path) -> dict:
    script = work / f"{target.name}-{len(rows)}.lua"
    headers = {"Content-Type": "application/json", **target.headers}
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(target.body(rows)))}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    script.write_text("\n".join(lines) + "\n")
    command = [*pin, "wrk", "-t1", f"-c{args.connections}", "--latency", "-s", str(script), target.url]
    subprocess.run([*command[:-4], "-d2s", *command[-4:]], capture_output=True, check=True)  # warm-up
    cpu_before = {name: cpu_seconds(*pids) for name, pids in target.watch.items()}
    proc = subprocess.Popen([*command[:-4], f"-d{args.duration}s", *command[-4:]], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    cpu_used = {name: cpu_seconds(*pids) - cpu_before[name] for name, pids in target.watch.items()}
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed against {target.name}:\n{out}")
    result = {"rows": len(rows), "wrk_cpu": (usage.ru_utime + usage.ru_stime) / args.duration}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Requests/sec:"):
            result["req_s"] = float(parts[1])
        elif parts[:1] in (["50%"], ["99%"]):
            result["p" + parts[0].rstrip("%")] = to_ms(parts[1])
        elif line.strip().startswith("Non-2xx"):
            result["non_2xx"] = int(parts[-1])
        elif line.strip().startswith("Socket errors"):
            result["socket_errors"] = line.split(":", 1)[1].strip()
    requests = result.get("req_s", 0) * args.duration
    for name, seconds in cpu_used.items():  # steadier than req/s on a shared machine
        result[f"{name}_cpu_us"] = round(seconds / requests * 1e6, 1) if requests else None
    return result


def to_ms(text: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def sequential_ms(target: Target, rows: list[list[float]], count: int = 200) -> float:
    """Median latency of requests sent one after another on one keep-alive connection."""
    url = urllib.parse.urlsplit(target.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    body = json.dumps(target.body(rows))
    headers = {"Content-Type": "application/json", **target.headers}
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", url.path, body, headers)
            response = conn.getresponse()
            response.read()
            times.append(time.perf_counter() - started)
    finally:
        conn.close()
    return sorted(times)[len(times) // 2] * 1000


def portal_target(url: str, headers: dict[str, str]) -> Target:
    url = url.rstrip("/")
    return Target(
        "portal", f"{url}/v2/models/iris/infer", f"{url}/v2/models/iris/ready", oip_body, oip_labels, headers=headers
    )


def bench_portal(data: dict, args: argparse.Namespace, work: Path) -> dict:
    """The portal target on a portal set up here, serving the saved model with --workers replicas."""
    with running_portal(work / "mlflow-model", args.workers, cpu_sets(args)[0], work) as portal:
        print(f"portal: ready {portal.deploy_s} s after the deploy with {portal.replicas} model-server replica(s), "
              f"one process each (pids {portal.replica_pids}, CPUs {portal.replica_cpus}), behind the router at "
              f"{portal.url}", flush=True)  # fmt: skip
        target = portal_target(portal.url, portal.headers)
        target.watch = {"router": [portal.router_pid], "replica": portal.replica_pids}
        results = bench(target, data, args, work)
        return {"replicas": portal.replicas, "deploy_s": portal.deploy_s, **results}


def bench(target: Target, data: dict, args: argparse.Namespace, work: Path) -> dict:
    server_pin, wrk_pin = cpu_sets(args)
    log = work / f"{target.name}.log"
    proc = None
    if target.command:
        env = {**os.environ, **target.env}
        proc = subprocess.Popen(
            [*server_pin, *target.command], cwd=target.cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
        )
        target.watch = {"server": [proc.pid]}  # taskset execs the server: the same pid
    try:
        started = time.monotonic()
        wait_ready(target, proc, log)
        startup = time.monotonic() - started
        x = data["x"]
        answer = target.parse(post(target.url, target.body(x[:32]), target.headers))
        if [int(v) for v in answer] != data["predict"][:32]:
            raise RuntimeError(f"{target.name} predicted {answer}, expected {data['predict'][:32]}")
        results = {"startup_s": round(startup, 2), "sequential_ms": round(sequential_ms(target, x[:1]), 2)}
        for n in args.rows:
            results[f"rows{n}"] = run_wrk(target, x[:n], args, wrk_pin, work)
        return results
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def report(results: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"\n{'target':9} {'rows':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'wrk cpu':>8} "
          f"{'x req/s':>8} {'p99/mlf':>8}  (keep-alive sequential p50)")  # fmt: skip
    base = results.get("mlflow")
    verdicts = []
    for name, result in results.items():
        for n in args.rows:
            r = result[f"rows{n}"]
            ratio = p99_ratio = ""
            if base and name != "mlflow":
                b = base[f"rows{n}"]
                ratio, p99_ratio = r["req_s"] / b["req_s"], r["p99"] / b["p99"]
                ok = ratio >= 3 and p99_ratio <= 0.5
                verdicts.append(
                    f"{name} {n} row(s): {ratio:.1f}× req/s, p99 {p99_ratio:.2f}× — {'ok' if ok else 'BELOW'}"
                )
                ratio, p99_ratio = f"{ratio:7.1f}×", f"{p99_ratio:8.3f}"
            errors = f"  non-2xx {r['non_2xx']}" if r.get("non_2xx") else ""
            errors += f"  socket errors: {r['socket_errors']}" if r.get("socket_errors") else ""
            print(f"{name:9} {n:4d} {r['req_s']:9.0f} {r['p50']:8.2f} {r['p99']:8.2f} {r['wrk_cpu']:7.0%} "
                  f"{ratio:>8} {p99_ratio:>8}  ({result['sequential_ms']} ms){errors}")  # fmt: skip
    if verdicts:
        print("\ntargets ≥ 3× MLflow's req/s and p99 ≤ ½ of MLflow's:")
        for line in verdicts:
            print("  " + line)
    if "portal" in results and "direct" in results:
        print("\nthe router's overhead (portal p50 − direct p50, same model server behind it):")
        for n in args.rows:
            portal, direct = results["portal"][f"rows{n}"], results["direct"][f"rows{n}"]
            print(f"  {n} row(s): {portal['p50'] - direct['p50']:+.2f} ms "
                  f"({portal['p50']:.2f} vs {direct['p50']:.2f} ms)")  # fmt: skip
    cpu = [f"{name} {n} row(s): " + ", ".join(f"{k.removesuffix('_cpu_us')} {v} µs" for k, v in r.items()
                                              if k.endswith("_cpu_us") and v is not None)
           for name, result in results.items() for n in args.rows if (r := result[f"rows{n}"])]  # fmt: skip
    if cpu:
        print("\nCPU per request (process CPU time during the run / requests answered):")
        for line in cpu:
            print("  " + line)
    issue_row(results, args)


def issue_row(results: dict[str, dict], args: argparse.Namespace) -> None:
    """The issue's row (#29: router adds ≤ 2 ms p50; ≥ 20× MLflow at 1 row, ≥ 6× at 32 rows), from this run."""
    portal, direct, mlflow = (results.get(k) for k in ("portal", "direct", "mlflow"))
    if portal is None or 1 not in args.rows:
        return
    goals = {1: 20, 32: 6}
    parts, peers, verdicts = [], [], []
    for n in args.rows:
        r = portal[f"rows{n}"]
        part = f"{n} row{'s' if n > 1 else ''} {r['req_s']:,.0f} req/s"
        if direct is not None:
            added = r["p50"] - direct[f"rows{n}"]["p50"]
            part += f", router adds {added:.1f} ms p50"
            peers.append(f"{direct[f'rows{n}']['req_s']:,.0f}")
            if n == 1:
                verdicts.append(f"router adds ≤ 2 ms p50: {'met' if added <= 2 else 'NOT met'}")
        if mlflow is not None:
            ratio = r["req_s"] / mlflow[f"rows{n}"]["req_s"]
            part += f" ({ratio:.1f}× MLflow)"
            if n in goals:
                verdicts.append(f"≥ {goals[n]}× MLflow at {n} row(s): {'met' if ratio >= goals[n] else 'NOT met'}")
        parts.append(part)
    peer = " / ".join(peers) + " req/s" if peers else "not run"
    print(f"\n| serving through the router | {'; '.join(parts)} | model server direct {peer} | {'; '.join(verdicts)} |")
    print(f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="direct,portal,mlflow,mlserver", help="comma list (missing ones skipped)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of load per run")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1, help="server processes (each target the same)")
    parser.add_argument("--rows", default="1,32", help="rows per request, comma list")
    parser.add_argument("--server-args", default="", help="extra arguments of our model server (direct only)")
    parser.add_argument(
        "--portal-url", help="an existing portal's service, …/serving/<project>/<service> (default: set one up)"
    )
    parser.add_argument("--portal-token", help="bearer token for --portal-url")
    parser.add_argument(
        "--mlserver-parallel-workers",
        type=int,
        help="MLServer's inference processes (default --workers; 0: inference in its HTTP process)",
    )
    parser.add_argument("--mlserver-batching", action="store_true", help="turn on MLServer's adaptive batching")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and wrk to separate cores")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--images", type=int, default=8, help="224×224×3 images per request for the JSON vs binary run (0: skip)"
    )
    parser.add_argument("--image-callers", type=int, default=4, help="concurrent tritonclient callers for --images")
    args = parser.parse_args()
    args.rows = [int(n) for n in args.rows.split(",")]
    if not shutil.which("wrk"):
        sys.exit("needs wrk: apt-get install -y wrk")
    if not (MLFLOW_VENV / "bin" / "python").exists():
        subprocess.run(["make", "mlflow-env"], cwd=ROOT, check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    try:
        (work / "train.py").write_text(TRAIN)
        subprocess.run([str(MLFLOW_VENV / "bin" / "python"), str(work / "train.py"), str(work)], check=True)
        data = json.loads((work / "iris.json").read_text())
        available = targets(args, work)
        wanted = [t for t in args.targets.split(",") if t]
        if args.portal_url and "portal" not in wanted:
            wanted.append("portal")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; pinning "
              f"{'server→0, wrk→1' if cpu_sets(args)[0] else 'off'}", flush=True)  # fmt: skip
        results = {}
        for name in wanted:
            if name == "portal" and name not in available:
                results[name] = bench_portal(data, args, work)
            elif name not in available:
                print(f"{name}: skipped (not available: see --help)", flush=True)
                continue
            else:
                results[name] = bench(available[name], data, args, work)
            print(f"{name}: {json.dumps(results[name])}", flush=True)
        if args.images and "direct" in wanted:
            server_pin, wrk_pin = cpu_sets(args)
            client_cpus = {int(wrk_pin[-1])} if wrk_pin else None
            results["images"] = bench_images(
                PYTHON, ROOT, work, args.images, args.image_callers, args.duration, server_pin, client_cpus
            )
            print(f"images: {json.dumps(results['images'])}", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        images = results.pop("images", None)
        report(results, args)
        if images:
            report_images(images, args.images, args.image_callers)
            results["images"] = images
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
