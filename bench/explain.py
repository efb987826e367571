"""The latency of per-prediction explanations (`POST /v2/models/<m>/explain`, docs/explainability.md): an iris
LogisticRegression saved with joblib, served by the portal's model server, explained against 50 background rows of
iris, 1 row and 32 rows per request, 20 sequential calls each on one keep-alive connection (after a warm-up call);
prints the median and the slowest, and the load average.

    .venv/bin/python bench/explain.py [--calls 20] [--background 50]
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

import httpx
import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--background", type=int, default=50)
    args = parser.parse_args()
    x, y = load_iris(return_X_y=True)
    background = x[:: max(1, len(x) // args.background)][: args.background].tolist()
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "model.joblib"
        joblib.dump(LogisticRegression(max_iter=1000).fit(x, y), model)
        command = [sys.executable, "-m", "apps.serving.modelserver", "--name", "iris", "--model", str(model)]
        server = subprocess.Popen([*command, "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            url = server.stdout.readline().split(" on ", 1)[1].split()[0] + "/v2/models/iris/explain"
            with httpx.Client(timeout=60) as client:
                for _ in range(100):  # the banner comes just before uvicorn listens
                    try:
                        client.get(url.rsplit("/", 1)[0])
                        break
                    except httpx.TransportError:
                        time.sleep(0.05)
                for rows in (1, 32):
                    data = x[:rows].tolist()
                    inputs = [{"name": "input-0", "shape": [rows, 4], "datatype": "FP64", "data": data}]
                    body = {"inputs": inputs, "parameters": {"background": background}}
                    assert client.post(url, json=body).status_code == 200
                    seconds = []
                    for _ in range(args.calls):
                        started = time.perf_counter()
                        response = client.post(url, json=body)
                        seconds.append(time.perf_counter() - started)
                        assert response.status_code == 200, response.text
                    method = response.json()["method"]
                    print(
                        f"{rows:>2} row(s), {len(background)} background rows, {method}: "
                        f"median {1000 * statistics.median(seconds):.1f} ms, max {1000 * max(seconds):.1f} ms"
                    )
        finally:
            server.terminate()
            server.wait(timeout=20)
    print("load average", " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
