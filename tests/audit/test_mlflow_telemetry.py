"""MLflow logging is telemetry, not an audited change: a 20-step loop of log-metric writes no audit entry (it wrote
20), nor do params, tags, inputs and a logged model's params/tags. What changes the run, the experiment or the
registry (create, update, delete, register, aliases) is still one entry per call. The volume of telemetry is
counted in aggregate on /metrics instead."""

from __future__ import annotations

from prometheus_client import REGISTRY

from apps.audit.models import AuditEntry
from tests.factories import make_token
from tests.models.conftest import MlflowApi


def logged(kind: str) -> float:
    return REGISTRY.get_sample_value("portal_tracking_logged_total", {"kind": kind}) or 0.0


def test_logging_to_a_run_writes_no_entry_and_is_counted(world):
    api = MlflowApi(make_token(world.alice, project=world.project_a))
    experiment_id = api.experiment("telemetry")
    run_id = api.run(experiment_id)["info"]["run_id"]
    assert list(AuditEntry.objects.values_list("action", "object_type")) == [
        ("create", "models.run"),
        ("create", "models.experiment"),
    ]
    before = {kind: logged(kind) for kind in ("metric", "param", "tag")}

    for step in range(20):
        body = {"run_id": run_id, "key": "loss", "value": 1 / (step + 1), "timestamp": 1000 + step, "step": step}
        assert api.post("runs/log-metric", body).status_code == 200
    calls = [
        ("runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"}),
        ("runs/set-tag", {"run_id": run_id, "key": "team", "value": "cv"}),
        ("runs/delete-tag", {"run_id": run_id, "key": "team"}),
        ("runs/log-batch", {"run_id": run_id, "metrics": [{"key": "acc", "value": 1, "timestamp": 1}],
                            "params": [{"key": "depth", "value": "3"}], "tags": [{"key": "t", "value": "v"}]}),
        ("runs/log-inputs", {"run_id": run_id, "datasets": [{"dataset": {"name": "iris", "digest": "abc"}}]}),
        ("runs/log-model", {"run_id": run_id, "model_json": '{"artifact_path": "model"}'}),
        ("runs/outputs", {"run_id": run_id, "models": []}),
    ]  # fmt: skip
    for endpoint, body in calls:
        assert api.post(endpoint, body).status_code == 200, endpoint
    assert AuditEntry.objects.count() == 2
    # tags: set-tag, the batch's, and MLflow 2's log-model history tag
    assert {kind: logged(kind) - before[kind] for kind in before} == {"metric": 21, "param": 2, "tag": 3}

    # changes to the run and the registry stay audited, one entry each
    assert api.post("runs/update", {"run_id": run_id, "status": "FINISHED", "end_time": 5000}).status_code == 200
    assert api.post("registered-models/create", {"name": "clf"}).status_code == 200
    version = api.post("model-versions/create", {"name": "clf", "source": f"runs:/{run_id}/model", "run_id": run_id})
    assert version.status_code == 200, version.content
    alias = {"name": "clf", "alias": "production", "version": "1"}
    assert api.post("registered-models/alias", alias).status_code == 200
    assert api.post("experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": "k", "value": "v"})
    assert api.post("runs/delete", {"run_id": run_id}).status_code == 200
    actions = list(AuditEntry.objects.order_by("pk").values_list("action", "object_type"))[2:]
    assert actions == [
        ("update", "models.run"),
        ("create", "models.registeredmodel"),
        ("create", "models.modelversion"),
        ("create", "models.modelalias"),
        ("create", "models.experimenttag"),
        ("update", "models.run"),
    ]


def test_a_logged_models_params_and_tags_are_telemetry_but_the_model_is_audited(world):
    api = MlflowApi(make_token(world.alice, project=world.project_a))
    experiment_id = api.experiment("logged")
    run_id = api.run(experiment_id)["info"]["run_id"]
    created = api.post("logged-models", {"experiment_id": experiment_id, "name": "m", "source_run_id": run_id})
    assert created.status_code == 200, created.content
    model_id = created.json()["model"]["info"]["model_id"]
    count = AuditEntry.objects.count()
    assert api.post(f"logged-models/{model_id}/params", {"params": [{"key": "a", "value": "1"}]}).status_code == 200
    assert api.patch(f"logged-models/{model_id}/tags", {"tags": [{"key": "t", "value": "v"}]}).status_code == 200
    assert api.delete(f"logged-models/{model_id}/tags/t", {}).status_code == 200
    assert AuditEntry.objects.count() == count
    assert api.patch(f"logged-models/{model_id}", {"status": "LOGGED_MODEL_READY"}).status_code == 200
    assert AuditEntry.objects.count() == count + 1
