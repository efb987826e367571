"""One official-client flow whose answers must match between the portal and `mlflow server` (run with
.venv-mlflow's python against either): prints one JSON object of what the client saw, with ids, times and
hosts left out so that the two outputs can be compared as they are (tests/models/test_against_mlflow_server.py).

Log (metrics with a 120-step history, NaN and ±Infinity, params and tags re-logged), history, search, artifacts,
log_model (which re-sends the run's metrics), register, alias, load, and the error codes of bad calls.
"""

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.credentials import get_default_host_creds
from mlflow.utils.server_info import fetch_server_info
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

experiment_name = sys.argv[1]
out = {}
client = MlflowClient()


def error_code(call):
    try:
        call()
    except MlflowException as exc:
        return exc.error_code
    return "no error"


def number(value):
    return value if math.isfinite(value) else str(value)


def run_view(run_id):
    run = client.get_run(run_id)
    return {
        "name": run.info.run_name,
        "status": run.info.status,
        "lifecycle_stage": run.info.lifecycle_stage,
        "params": run.data.params,
        "metrics": {k: number(v) for k, v in run.data.metrics.items()},
        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
        "run_name_tag": run.data.tags.get("mlflow.runName"),
        "artifact_uri_tail": run.info.artifact_uri.rsplit("/", 1)[-1],
        "inputs": sorted((d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs),
    }


experiment = mlflow.set_experiment(experiment_name)
out["experiment_lifecycle"] = experiment.lifecycle_stage
now = int(time.time() * 1000)
with mlflow.start_run(run_name="first") as run:
    first = run.info.run_id
    for step in range(120):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step, timestamp=now + step)
    mlflow.log_metric("acc", 0.9, step=3)
    mlflow.log_metrics({"inf": math.inf, "ninf": -math.inf, "nan": math.nan})
    mlflow.log_param("alpha", 0.5)
    mlflow.log_param("alpha", 0.5)  # the same value again: accepted
    mlflow.log_params({"beta": "b", "gamma": 3})
    mlflow.set_tag("team", "vision")
    mlflow.set_tag("team", "vision")
    client.log_batch(
        first,
        metrics=[Metric("batch_m", float(i), now + i, i) for i in range(10)] + [Metric("batch_m", 9.0, now + 9, 9)],
        params=[Param("p_batch", "1")],
        tags=[RunTag("t_batch", "x")],
    )
    client.log_batch(first, metrics=[Metric("batch_m", float(i), now + i, i) for i in range(10)])  # a retry
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a.txt").write_text("hello artifact")
        data = Path(tmp, "data")
        (data / "sub").mkdir(parents=True)
        (data / "table.csv").write_text("x,y\n1,2\n")
        (data / "sub" / "b.txt").write_text("nested")
        mlflow.log_artifact(str(Path(tmp, "a.txt")))
        mlflow.log_artifacts(str(data), artifact_path="data")
        mlflow.log_text("inline text", "notes/readme.md")
        mlflow.log_dict({"k": [1, 2]}, "config.json")
    X, y = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=300).fit(X, y)
    logged = mlflow.sklearn.log_model(model, name="model", input_example=X[:2], pip_requirements=["scikit-learn"])
    out["changed_param"] = error_code(lambda: client.log_param(first, "alpha", "0.7"))

with mlflow.start_run(run_name="second") as second_run:
    mlflow.log_metric("acc", 0.5)
    mlflow.log_param("beta", "c")
    mlflow.set_tag("team", "nlp")
second = second_run.info.run_id

out["first"] = run_view(first)
out["second"] = run_view(second)
loss = client.get_metric_history(first, "loss")
out["loss_points"] = len(loss)
out["loss_history"] = [(m.step, m.timestamp - now, m.value) for m in loss]
out["batch_history"] = [(m.step, m.value) for m in client.get_metric_history(first, "batch_m")]
out["special_history"] = {k: [number(m.value) for m in client.get_metric_history(first, k)] for k in ("inf", "ninf")}
out["nan_history"] = [str(m.value) for m in client.get_metric_history(first, "nan")]
out["missing_history"] = [m.value for m in client.get_metric_history(first, "nothing")]


def names(**kwargs):
    return [r.info.run_name for r in mlflow.search_runs(output_format="list", **kwargs)]


out["search"] = {
    "acc_gt": sorted(names(filter_string="metrics.acc > 0.7")),
    "param_eq": sorted(names(filter_string="params.beta = 'b'")),
    "tag_like": sorted(names(filter_string="tags.team LIKE 'vis%'")),
    "name_eq": sorted(names(filter_string="attributes.run_name = 'second'")),
    "order_acc_asc": names(order_by=["metrics.acc ASC"]),
    "order_acc_desc": names(order_by=["metrics.acc DESC"]),
    "inf_gt": sorted(names(filter_string="metrics.inf > 1e308")),
    "max_results_1": len(names(max_results=1)),
}
out["search_bad_filter"] = error_code(lambda: mlflow.search_runs(filter_string="metrics.acc >>> 1"))

out["root_artifacts"] = sorted((f.path, f.is_dir, f.file_size) for f in client.list_artifacts(first))
out["data_artifacts"] = sorted((f.path, f.is_dir, f.file_size) for f in client.list_artifacts(first, "data"))
with tempfile.TemporaryDirectory() as tmp:
    local = client.download_artifacts(first, "data", tmp)
    out["downloaded"] = sorted(
        (str(p.relative_to(local)), p.read_text()) for p in Path(local).rglob("*") if p.is_file()
    )
out["loaded_dict"] = mlflow.artifacts.load_dict(f"runs:/{first}/config.json")
out["logged_model_name"] = logged.name
out["logged_model_flavors"] = sorted(logged.flavors)

version = mlflow.register_model(f"runs:/{first}/model", f"{experiment_name}-clf")
out["version"] = (version.version, version.status, version.current_stage)
client.set_registered_model_alias(f"{experiment_name}-clf", "production", version.version)
by_alias = client.get_model_version_by_alias(f"{experiment_name}-clf", "production")
out["alias"] = (by_alias.version, sorted(by_alias.aliases))
registered = client.get_registered_model(f"{experiment_name}-clf")
out["registered_aliases"] = registered.aliases
out["latest_versions"] = [(v.version, v.current_stage) for v in registered.latest_versions]
loaded = mlflow.pyfunc.load_model(f"models:/{experiment_name}-clf@production")
out["predictions_match"] = [int(v) for v in loaded.predict(X[:5])] == [int(v) for v in model.predict(X[:5])]
out["alias_latest"] = client.get_model_version_by_alias(f"{experiment_name}-clf", "latest").version
out["alias_missing"] = error_code(lambda: client.get_model_version_by_alias(f"{experiment_name}-clf", "nope"))
out["register_again"] = error_code(lambda: client.create_registered_model(f"{experiment_name}-clf"))

out["unknown_run"] = error_code(lambda: client.get_run("0" * 32))
out["unknown_experiment"] = error_code(lambda: client.get_experiment("999999"))
out["by_missing_name"] = mlflow.get_experiment_by_name(f"{experiment_name}-none")
client.delete_run(second)
out["deleted_search"] = sorted(names(run_view_type=mlflow.entities.ViewType.DELETED_ONLY))
out["log_to_deleted"] = error_code(lambda: client.log_metric(second, "x", 1.0))
# last, once the server is warm: the client gives this probe 3 seconds
info = fetch_server_info(get_default_host_creds(mlflow.get_tracking_uri()))
out["server_info_status"] = info.status_code
out["server_info_keys"] = sorted(info.data or {})
print(json.dumps(out, default=str))
