"""The official client end to end (run with .venv-mlflow's python): prints one JSON object of what it saw."""

import json
import sys
import tempfile
import time
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

experiment_name = sys.argv[1] if len(sys.argv) > 1 else "flow"
out = {}
client = MlflowClient()
experiment = mlflow.set_experiment(experiment_name)
out["client_version"] = mlflow.__version__
out["experiment_id"] = experiment.experiment_id
out["experiment_name"] = experiment.name

with mlflow.start_run(run_name="first") as run:
    run_id = run.info.run_id
    mlflow.log_param("alpha", 0.5)
    mlflow.log_params({"beta": "b", "gamma": 3})
    for step in range(5):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    mlflow.log_metrics({"acc": 0.9, "f1": 0.8}, step=4)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric("batch_m", float(i), now + i, i) for i in range(10)],
        params=[Param("p_batch", "1")],
        tags=[RunTag("t_batch", "x")],
    )
    mlflow.set_tags({"team": "vision", "stage": "dev"})
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a.txt").write_text("hello artifact")
        data = Path(tmp, "data")
        (data / "sub").mkdir(parents=True)
        (data / "table.csv").write_text("x,y\n1,2\n")
        (data / "sub" / "b.txt").write_text("nested")
        mlflow.log_artifact(str(Path(tmp, "a.txt")))
        mlflow.log_artifacts(str(data), artifact_path="data")
        mlflow.log_text("inline text", "notes/readme.md")

with mlflow.start_run(run_name="second"):
    mlflow.log_metric("acc", 0.5)
    mlflow.log_param("beta", "c")
    mlflow.set_tag("team", "nlp")

fetched = client.get_run(run_id)
out["params"] = fetched.data.params
out["metrics"] = fetched.data.metrics
out["tags"] = {k: v for k, v in fetched.data.tags.items() if not k.startswith("mlflow.")}
out["status"] = fetched.info.status
out["run_name"] = fetched.info.run_name
out["artifact_uri"] = fetched.info.artifact_uri
out["history"] = [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")]
out["search_acc"] = sorted(
    r.info.run_name
    for r in mlflow.search_runs(filter_string="metrics.acc > 0.7 and params.beta = 'b'", output_format="list")
)
out["search_like"] = sorted(
    r.info.run_name for r in mlflow.search_runs(filter_string="tags.team LIKE 'vis%'", output_format="list")
)
out["search_order"] = [r.info.run_name for r in mlflow.search_runs(order_by=["metrics.acc ASC"], output_format="list")]
# Hostile filters (issue 27): many clauses stay fast, too many and a pathological LIKE are refused in MLflow's words.
many = " AND ".join(["metrics.acc > 0.7", "params.beta = 'b'", "tags.team LIKE 'vis%'"] * 100)
out["search_many"] = sorted(r.info.run_name for r in mlflow.search_runs(filter_string=many, output_format="list"))
out["search_percent"] = sorted(
    r.info.run_name for r in mlflow.search_runs(filter_string=f"tags.team LIKE '{'%' * 5000}'", output_format="list")
)
try:
    mlflow.search_runs(filter_string=" AND ".join(["params.beta = 'b'"] * 401), output_format="list")
    out["search_too_many"] = "accepted"
except mlflow.exceptions.MlflowException as exc:
    out["search_too_many"] = exc.error_code
out["root_artifacts"] = sorted((f.path, f.is_dir) for f in client.list_artifacts(run_id))
out["data_artifacts"] = sorted((f.path, f.is_dir) for f in client.list_artifacts(run_id, "data"))
with tempfile.TemporaryDirectory() as tmp:
    local = client.download_artifacts(run_id, "data", tmp)
    out["downloaded"] = sorted(str(p.relative_to(local)) for p in Path(local).rglob("*") if p.is_file())
    out["nested"] = Path(local, "sub", "b.txt").read_text()

X, y = load_iris(return_X_y=True)
mlflow.sklearn.autolog()
with mlflow.start_run(run_name="autolog") as autolog_run:
    LogisticRegression(max_iter=300).fit(X, y)
mlflow.sklearn.autolog(disable=True)
auto = client.get_run(autolog_run.info.run_id)
out["autolog_params"] = sorted(auto.data.params)[:50]
out["autolog_metrics"] = sorted(auto.data.metrics)

with mlflow.start_run(run_name="model") as model_run:
    model = LogisticRegression(max_iter=300).fit(X, y)
    # MLflow 3 names a logged model (and records it through /logged-models); MLflow 2 gives its artifact path.
    where = {"name": "model"} if int(mlflow.__version__.split(".")[0]) >= 3 else {"artifact_path": "model"}
    info = mlflow.sklearn.log_model(model, input_example=X[:2], pip_requirements=["scikit-learn"], **where)
out["model_uri"] = info.model_uri
version = mlflow.register_model(f"runs:/{model_run.info.run_id}/model", "iris-clf")
out["version"] = version.version
out["version_status"] = version.status
client.set_registered_model_alias("iris-clf", "production", version.version)
out["alias_version"] = client.get_model_version_by_alias("iris-clf", "production").version
loaded = mlflow.pyfunc.load_model("models:/iris-clf@production")
out["predictions"] = [int(v) for v in loaded.predict(X[:5])]
out["expected"] = [int(v) for v in model.predict(X[:5])]
print(json.dumps(out, default=str))
