"""Helpers of the model optimisation tests: run a script or a built-in task in the "train" task environment, which has
torch and the ONNX packages (requirements-train.txt; the portal's .venv has neither). The fixture that skips without
them is tests/jobs/conftest.py's `onnx_python`."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from tests.jobs.test_builtin_tasks import REPO, task_env


def run_script(python: str, source: str, timeout: float = 300) -> Any:
    """Run `source` in `python` with the repository importable; the JSON its last output line holds."""
    done = subprocess.run(  # nosec B603
        [python, "-c", textwrap.dedent(source)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_train_task(
    python: str, module: str, out: Path, *args: str, inputs: dict[str, Path] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run(  # nosec B603
        [python, "-m", f"apps.jobs.builtin_tasks.{module}", *args],
        cwd=out,
        env=task_env(out, inputs, OMP_NUM_THREADS="1", **env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


TORCH_MLP = """
    import json, sys
    from pathlib import Path
    import torch
    from sklearn.datasets import load_iris

    torch.manual_seed(0)
    x, y = load_iris(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    net = torch.nn.Sequential(torch.nn.Linear(4, 256), torch.nn.ReLU(), torch.nn.Linear(256, 3))
    optimiser = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(200):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimiser.step()
    net.eval()
    folder = Path({folder!r})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.trace(net, x[:2]), str(folder / "data" / "model.pth"))
    tensor = {{"type": "tensor", "name": "x", "tensor-spec": {{"dtype": "float32", "shape": [-1, 4]}}}}
    mlmodel = {{
        "flavors": {{"pytorch": {{"model_data": "data"}}, "python_function": {{"loader_module": "mlflow.pytorch"}}}},
        "signature": {{"inputs": json.dumps([tensor]), "outputs": None}},
        "metadata": {{"classes": ["setosa", "versicolor", "virginica"]}},
    }}
    (folder / "MLmodel").write_text(json.dumps(mlmodel))
    print(json.dumps({{"accuracy": float((net(x).argmax(1) == y).float().mean())}}))
"""


def torch_mlp(python: str, folder: Path) -> float:
    """A small MLP (4 → 256 → 3) trained on iris, saved as the image-classification app saves its CNN: TorchScript in
    an MLflow pytorch folder with a tensor signature and the class names. Its train accuracy."""
    return run_script(python, TORCH_MLP.format(folder=str(folder)))["accuracy"]
