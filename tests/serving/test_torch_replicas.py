"""PyTorch services: their replicas run in the train task environment (torch is never in the portal's .venv), and the
model server passes an MLmodel's free-form metadata on and names a module's dict outputs by their keys."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from django.conf import settings

from apps.serving.models import Framework
from apps.serving.modelserver.loading import load
from apps.serving.replicas import server_command
from tests.jobs.conftest import train_python  # noqa: F401 (fixture: skips without `make train-env`)


@pytest.mark.parametrize(
    ("framework", "python"),
    [(Framework.PYTORCH, "{python:train}"), (Framework.SKLEARN, "{python}"), (Framework.ONNX, "{python:train}")],
)
def test_a_pytorch_replica_runs_in_the_train_environment(framework, python):
    config = {"framework": framework, "model_name": "m", "model_version": 2}
    command = server_command(config, python="{python}", host="127.0.0.1", port=1, model_path="/m")
    assert command[:3] == [python, "-m", "apps.serving.modelserver"]
    # a cluster names its image's python: left as it is
    assert server_command(config, python="python3", host="0.0.0.0", port=1, model_path="/m")[0] == "python3"  # nosec B104


def test_the_mlmodel_metadata_reaches_the_model_parameters(tmp_path):
    from sklearn.dummy import DummyClassifier

    from apps.jobs.builtin_tasks.sklearn_train import mlflow_model_dir

    folder = mlflow_model_dir(DummyClassifier().fit([[0], [1]], [0, 1]), tmp_path)
    mlmodel = json.loads((folder / "MLmodel").read_text())
    (folder / "MLmodel").write_text(json.dumps({**mlmodel, "metadata": {"image": {"pixel_range": [0, 16]}}}))
    assert load(folder).parameters["metadata"] == {"image": {"pixel_range": [0, 16]}}


@pytest.mark.usefixtures("train_python")
def test_a_module_answering_a_dict_serves_each_key_as_an_output(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np, torch
        sys.path.insert(0, {str(settings.BASE_DIR)!r})
        from apps.serving.modelserver.loading import load

        class Both(torch.nn.Module):
            def forward(self, x):
                return {{"predict": x.sum(dim=1).argmax(dim=1), "predict_proba": torch.softmax(x.sum(dim=1), dim=1)}}

        traced = torch.jit.trace(Both(), torch.zeros(2, 3, 4), strict=False)
        torch.jit.save(traced, {str(tmp_path / "model.pt")!r})
        predictor = load({str(tmp_path / "model.pt")!r})
        x = np.zeros((2, 3, 4), dtype=np.float32)
        x[0, :, 3] = 1
        out = predictor.run(x, ("predict", "predict_proba"))
        print(json.dumps({{"predict": out["predict"].tolist(), "proba": list(out["predict_proba"].shape)}}))
    """)
    python = settings.PORTAL_TASK_ENVS["train"]
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120, check=False)  # nosec B603
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"predict": [3, 0], "proba": [2, 4]}
