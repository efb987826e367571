"""The image part of bench/serving.py: a batch of 224×224×3 FP32 images sent by NVIDIA's `tritonclient[http]` to
our model server as JSON tensors and as binary tensors (the binary tensor data extension), side by side.

The model is deliberately cheap (a per-channel mean, then a LogisticRegression: ~0.1 ms for the batch), so what
is measured is the transport: encoding, sending and decoding a 602 kB-per-image tensor. It is saved as an MLflow
Model folder by hand (pickle + a tensor signature `[-1, 224, 224, 3]` float32), so the server's metadata and
input checks are the real ones. Each encoding gets the same number of client threads (one tritonclient each, the
request built once with `set_data_from_numpy`, as a real caller reuses its buffers), and the server's own CPU
time per request is read from /proc, so the server's cost shows apart from the client's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import joblib
import numpy as np

SIDE = 224


def save_image_model(folder: Path) -> Path:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    rng = np.random.default_rng(0)
    x = rng.random((30, SIDE, SIDE, 3), dtype=np.float32)
    y = np.arange(30) % 3
    x[y == 1, ..., 0] += 0.5  # a class per dominant channel
    x[y == 2, ..., 2] += 0.5
    # One mean per channel (numpy's own function: it pickles by name, whatever imports the model).
    means = FunctionTransformer(np.mean, kw_args={"axis": (1, 2)})
    model = make_pipeline(means, LogisticRegression(max_iter=500)).fit(x, y)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, folder / "model.pkl")
    spec = json.dumps([{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, SIDE, SIDE, 3]}}])
    (folder / "MLmodel").write_text(
        "flavors:\n  sklearn:\n    pickled_model: model.pkl\n    serialization_format: pickle\n"
        f"signature:\n  inputs: '{spec}'\n"
    )
    return folder


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, batch: np.ndarray, binary: bool, threads: int, duration: float, pid: int) -> dict:
    """`threads` callers posting `batch` for `duration` seconds (after a short warm-up): req/s, p50, p99."""
    import tritonclient.http as triton

    latencies: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def caller() -> None:
        client = triton.InferenceServerClient(url, network_timeout=120, connection_timeout=60)
        tensor = triton.InferInput("input-0", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        outputs = [triton.InferRequestedOutput("predict_proba", binary_data=binary)]
        mine = []
        try:
            while not stop.is_set():
                started = time.perf_counter()
                result = client.infer("images", [tensor], outputs=outputs)
                mine.append(time.perf_counter() - started)
                if result.as_numpy("predict_proba").shape != (batch.shape[0], 3):
                    errors.append("wrong answer shape")
        except Exception as exc:  # reported, not raised: the other threads' numbers still print
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            client.close()
        latencies.extend(mine)

    warm = triton.InferenceServerClient(url, network_timeout=120)
    warm_input = triton.InferInput("input-0", list(batch.shape), "FP32")
    warm_input.set_data_from_numpy(batch, binary_data=binary)
    for _ in range(3):
        warm.infer("images", [warm_input])
    warm.close()
    cpu_before = cpu_seconds(pid)
    workers = [threading.Thread(target=caller) for _ in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    time.sleep(duration)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    server_cpu = cpu_seconds(pid) - cpu_before
    ordered = sorted(latencies)
    count = len(ordered)
    return {
        "encoding": "binary" if binary else "json",
        "requests": count,
        "req_s": count / elapsed,
        "images_s": count * batch.shape[0] / elapsed,
        "p50": ordered[count // 2] * 1000 if count else float("nan"),
        "p99": ordered[min(count - 1, int(count * 0.99))] * 1000 if count else float("nan"),
        "server_ms": server_cpu / count * 1000 if count else float("nan"),
        "errors": errors[:3],
    }


def bench_images(python: Path, root: Path, work: Path, images: int, threads: int, duration: float,
                 server_pin: list[str], client_cpus: set[int] | None) -> list[dict]:  # fmt: skip
    """Start our model server on the image model and load it with JSON, then binary, requests."""
    import socket

    folder = save_image_model(work / "image-model")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = work / "images.log"
    command = [*server_pin, str(python), "-m", "apps.serving.modelserver", "--name", "images", "--model", str(folder)]
    command += ["--port", str(port), "--max-body-mb", "256"]
    proc = subprocess.Popen(command, cwd=root, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    affinity = os.sched_getaffinity(0)
    try:
        deadline = time.monotonic() + 180
        while b"modelserver: serving" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the image model server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(0.5)  # the banner comes just before uvicorn listens
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        batch = np.random.default_rng(1).random((images, SIDE, SIDE, 3), dtype=np.float32)
        url = f"127.0.0.1:{port}"
        return [load(url, batch, binary, threads, duration, proc.pid) for binary in (False, True)]
    finally:
        os.sched_setaffinity(0, affinity)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report_images(rows: list[dict], images: int, threads: int) -> None:
    mb = images * SIDE * SIDE * 3 * 4 / 1e6
    print(f"\n{images} image(s) of 224×224×3 FP32 per request ({mb:.1f} MB raw), tritonclient, {threads} caller(s):")
    print(f"{'encoding':9} {'req/s':>8} {'images/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'server CPU ms/req':>18}")
    for r in rows:
        errors = f"  errors: {r['errors']}" if r["errors"] else ""
        print(f"{r['encoding']:9} {r['req_s']:8.1f} {r['images_s']:9.1f} {r['p50']:9.1f} {r['p99']:9.1f} "
              f"{r['server_ms']:18.1f}{errors}")  # fmt: skip
    if len(rows) == 2 and rows[0]["req_s"]:
        json_row, binary_row = rows
        print(f"binary / json: {binary_row['req_s'] / json_row['req_s']:.1f}× req/s, "
              f"p99 {binary_row['p99'] / json_row['p99']:.2f}×, "
              f"server CPU {binary_row['server_ms'] / json_row['server_ms']:.2f}×")  # fmt: skip
