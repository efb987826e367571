"""Replicas as runtime workloads: where a revision's model is, the workload each replica (locally) or each revision
(on Kubernetes) becomes, stopping them, and asking a replica whether it is ready (which of the two a revision gets,
and starting them: apps/serving/hosting.py).

Locally every replica is one model-server process (`python -m apps.serving.modelserver … --port 0`): it picks a
free port itself and says which in its banner line, which the runtime listener reads (apps/serving/runtime_hooks.py)
— no port is chosen here and raced for. A custom server (framework "custom") cannot tell us: it gets a free port
in `{port}` of its command. On Kubernetes a revision is one workload of kind "service" (a Deployment + Service + HPA,
or a KServe InferenceService when the cluster has KServe): its single Replica row stands for all its pods, whose
count the cluster's autoscaler owns.
"""

from __future__ import annotations

import logging
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.utils import timezone

from apps.models import artifacts
from apps.runtime.base import get_runtime
from apps.runtime.local.launch import free_port
from apps.runtime.workload import Resources, Status, Workload
from apps.serving.models import Framework, InferenceService, Replica, Revision

logger = logging.getLogger(__name__)

LLM_PYTHON = "{python:llm}"  # the task environment of llm replicas (settings.PORTAL_TASK_ENVS)
# PyTorch and ONNX models are served from the train task environment (.venv-train, `make train-env`): torch and
# onnxruntime live there, never in the portal's .venv; the model server's own packages come from .venv through its .pth.
TRAIN_PYTHON = "{python:train}"
TRAIN_FORMATS = (Framework.PYTORCH, Framework.ONNX)
FILE_FORMATS = {".onnx": "onnx", ".pt": "pytorch", ".pth": "pytorch", ".pt2": "pytorch", ".ubj": "xgboost",
                ".xgb": "xgboost", ".joblib": "sklearn", ".pkl": "sklearn", ".skops": "sklearn"}  # fmt: skip
PACKAGED_LLM = "packaged:smollm2"  # apps/serving/modelserver/llm.py PACKAGED: SmolLM2-135M-Instruct from PyPI
LABEL = "serving_replica"  # the runtime hands workloads carrying it to apps.serving.runtime_hooks
CLUSTER_PORT = 8080
READY_TIMEOUT = 1.0  # seconds for one readiness request
BANNER = re.compile(r"modelserver: serving .* on (http://[^\s/]+:\d+)")
_ERROR_LINE = re.compile(r"(cannot|error|exception|traceback|not found|no such|denied|failed|refused)", re.I)
LIVE = (Replica.Status.STARTING, Replica.Status.READY)
# KServe's model formats, by our framework (KServe picks a serving runtime by format).
KSERVE_FORMATS = {
    Framework.SKLEARN: "sklearn",
    Framework.XGBOOST: "xgboost",
    Framework.PYTORCH: "pytorch",
    Framework.ONNX: "onnx",
    Framework.MLFLOW: "mlflow",
}


def kserve_format(config: dict[str, Any]) -> str:
    """The model format KServe picks the serving runtime by: the deployed version's own (its files' flavour, frozen in
    the revision as `model_format`: an ONNX version of a service first deployed with scikit-learn is served by the
    ONNX runtime), else the service's framework's, else "mlflow" (an MLflow Model folder)."""
    return KSERVE_FORMATS.get(str(config.get("model_format") or "")) or KSERVE_FORMATS.get(
        config.get("framework"), "mlflow"
    )


# --- Where the model is -------------------------------------------------------------------------------------------


# An MLmodel without a native flavour the server knows may still name one as its pyfunc loader (as
# apps/serving/modelserver/loading.py reads it); a folder with one of these is a Hugging Face model or a PEFT adapter.
LOADER_FORMATS = {"mlflow.sklearn": "sklearn", "mlflow.xgboost": "xgboost", "mlflow.onnx": "onnx",
                  "mlflow.pytorch": "pytorch"}  # fmt: skip
LLM_FILES = frozenset({"config.json", "adapter_config.json"})


def _flavors(rel: str) -> dict[str, Any] | None:
    """The flavours of the MLmodel of a version's folder (or of its model/ folder); None when it has no MLmodel."""
    import yaml

    for mlmodel in (f"{rel}/MLmodel", f"{rel}/model/MLmodel"):
        handle = artifacts.open_file(mlmodel)
        if handle is None:
            continue
        with handle:
            try:
                flavors = (yaml.safe_load(handle.read(1 << 20)) or {}).get("flavors") or {}
            except (yaml.YAMLError, AttributeError, UnicodeDecodeError):
                return {}
        return flavors if isinstance(flavors, dict) else {}
    return None


def _file_names(rel: str) -> list[str]:
    return [entry["path"] for entry in artifacts.list_dir(rel) if not entry["is_dir"]]


def model_format(source: str) -> str:
    """The framework a version's files need, from its MLmodel's flavours (an MLflow Model folder, or one under model/;
    else its pyfunc loader) or its file's suffix (the file itself, or the one model file of its folder, as the model
    server picks it): "onnx", "pytorch", "xgboost", "sklearn", or "" when they do not say."""
    rel = storage_path(source)
    if not artifacts.is_dir(rel):
        suffix = Path(rel).suffix.lower()
        return FILE_FORMATS.get(suffix, "")
    flavors = _flavors(rel)
    if flavors is not None:
        native = next((name for name in ("onnx", "pytorch", "xgboost", "sklearn") if name in flavors), "")
        pyfunc = flavors.get("python_function")
        loader = pyfunc.get("loader_module") if isinstance(pyfunc, dict) else None
        return native or LOADER_FORMATS.get(str(loader or ""), "")
    files = [name for name in _file_names(rel) if Path(name).suffix.lower() in FILE_FORMATS]
    named = [name for name in files if Path(name).stem == "model"]
    chosen = named if len(named) == 1 else files
    return FILE_FORMATS[Path(chosen[0]).suffix.lower()] if len(chosen) == 1 else ""


def default_framework(source: str) -> str:
    """The framework a new service of this version starts with ("Deploy this version"): its `model_format`; else an
    MLflow Model of another flavour is served as MLflow pyfunc, a Hugging Face folder, PEFT adapter or GGUF file as
    an llm; scikit-learn only when nothing says."""
    found = model_format(source)
    if found:
        return Framework(found)
    rel = storage_path(source)
    if not artifacts.is_dir(rel):
        return Framework.LLM if rel.lower().endswith(".gguf") else Framework.SKLEARN
    if _flavors(rel):
        return Framework.MLFLOW
    names = _file_names(rel)
    if LLM_FILES.intersection(names) or any(name.lower().endswith(".gguf") for name in names):
        return Framework.LLM
    return Framework.SKLEARN


def storage_path(source: str) -> str:
    """The artifact-storage path of a version's source (the registry stores every source as mlflow-artifacts:/…)."""
    return artifacts.clean_path(source.removeprefix("mlflow-artifacts:").lstrip("/"))


def revision_dir(service: InferenceService, number: int) -> Path:
    return Path(settings.PORTAL_WORK_DIR) / "serving" / service.project.slug / service.name / f"r{number}"


def local_model_path(source: str) -> str | None:
    """The model's own folder or file when the artifact storage is a local filesystem (nothing is copied)."""
    store = artifacts.storage()
    try:
        return store.path(storage_path(source))
    except NotImplementedError:  # remote storage (S3): no local path
        return None


def materialise(source: str, dest: Path) -> Path:
    """Copy the model's files from the artifact storage into `dest` (for pods, which see the work folder only, and
    for remote storage). A single file stays a single file. Returns the path to give the model server."""
    rel = storage_path(source)
    if dest.exists():
        shutil.rmtree(dest)
    if not artifacts.is_dir(rel):
        handle = artifacts.open_file(rel)
        if handle is None:
            return dest / Path(rel).name  # missing: the model server will say "no model at …"
        dest.mkdir(parents=True, exist_ok=True)
        with handle, open(dest / Path(rel).name, "wb") as out:
            shutil.copyfileobj(handle, out, artifacts.CHUNK)
        return dest / Path(rel).name
    _copy_tree(rel, dest)
    return dest


def _copy_tree(rel: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in artifacts.list_dir(rel):
        child = f"{rel}/{entry['path']}"
        if entry["is_dir"]:
            _copy_tree(child, dest / entry["path"])
            continue
        handle = artifacts.open_file(child)
        if handle is not None:
            with handle, open(dest / entry["path"], "wb") as out:
                shutil.copyfileobj(handle, out, artifacts.CHUNK)


def storage_uri(config: dict[str, Any], cluster_work_dir: str, work_claim: str) -> str:
    """Where KServe's storage initializer finds the model: the copy in the work folder, on its claim."""
    path = str(config.get("model_path") or "")
    if work_claim and path.startswith(cluster_work_dir.rstrip("/") + "/"):
        return f"pvc://{work_claim}/{path[len(cluster_work_dir.rstrip('/')) + 1 :]}"
    return path


# --- Workloads ----------------------------------------------------------------------------------------------------


def _resources(config: dict[str, Any]) -> Resources:
    return Resources.from_json(config.get("resources"))


def _env(service: InferenceService, revision: Revision, config: dict[str, Any]) -> dict[str, str]:
    env = {str(k): str(v) for k, v in (config.get("env") or {}).items()}
    env.update(
        {
            "PORTAL_PROJECT": service.project.slug,
            "PORTAL_SERVICE": service.name,
            "PORTAL_REVISION": str(revision.number),
        }
    )
    return env


def _labels(service: InferenceService, revision: Revision, replica: Replica) -> dict[str, str]:
    return {
        LABEL: str(replica.pk),
        "project": service.project.slug,
        "service": service.name,
        "revision": str(revision.number),
    }


def server_command(config: dict[str, Any], *, python: str, host: str, port: int, model_path: str) -> list[str]:
    """The model server's command line (apps/serving/modelserver/__main__.py). An llm revision runs in the `llm`
    task environment ("{python:llm}": .venv-llm, `make llm-env`; on a cluster the image's python), with as many
    forward-pass threads as whole CPUs it requests, on the packaged model unless a version gives one. A pytorch revision
    runs in the `train` task environment, which has torch ("{python:train}"; on a cluster the image's python), and so
    does an onnx one (onnxruntime) and any revision whose model is of flavour pytorch or onnx (`model_format`, frozen
    in the config at deploy): an ONNX version made by the onnx-optimise template serves whatever the service's
    framework says."""
    if config.get("framework") == Framework.LLM:
        threads = max(1, int(float(_resources(config).cpu or 1)))
        return [
            LLM_PYTHON if python == "{python}" else python, "-m", "apps.serving.modelserver", "--runtime", "llm",
            "--name", config["model_name"], "--model", model_path or PACKAGED_LLM,
            "--version", str(config.get("model_version") or 1), "--threads", str(threads),
            "--host", host, "--port", str(port),
        ]  # fmt: skip
    if python == "{python}" and (
        config.get("framework") in TRAIN_FORMATS or config.get("model_format") in TRAIN_FORMATS
    ):
        python = TRAIN_PYTHON
    return [
        python, "-m", "apps.serving.modelserver", "--name", config["model_name"], "--model", model_path,
        "--version", str(config.get("model_version") or 1), "--host", host, "--port", str(port),
    ]  # fmt: skip


def local_workload(service: InferenceService, revision: Revision, replica: Replica) -> tuple[Workload, str]:
    """(the workload of one local replica, its upstream when known now: only a custom server's)."""
    config = revision.config
    env = _env(service, revision, config)
    workdir = revision_dir(service, revision.number).parent
    # The port is chosen here and declared (`ports`): the local sandbox forwards exactly the declared ports from the
    # host's loopback into the replica's own network namespace (apps/runtime/local/sandbox.py).
    port = free_port()
    if config.get("framework") == Framework.CUSTOM:
        values = {"port": str(port), "model": str(config.get("model_path") or "")}
        command = [_fill(str(token), values) for token in config.get("command") or []]
        upstream = f"http://127.0.0.1:{port}"
    else:
        command = server_command(
            config, python="{python}", host="127.0.0.1", port=port, model_path=str(config.get("model_path") or "")
        )
        env["PYTHONPATH"] = str(settings.BASE_DIR)  # `-m apps.serving.modelserver` from the service's own folder
        upstream = ""
    workload = Workload(
        uid=f"serving-{replica.pk}",
        name=f"{service.project.slug}-{service.name}-r{revision.number}-{replica.index}",
        project=service.project.slug,
        command=command,
        kind="service",
        framework=str(config.get("framework") or ""),
        image=str(config.get("image") or ""),
        env=env,
        workdir=str(workdir),
        resources=_resources(config),
        labels=_labels(service, revision, replica),
        ports={"http": port},
    )
    return workload, upstream


def _fill(token: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        token = token.replace("{" + key + "}", value)
    return token


def cluster_workload(service: InferenceService, revision: Revision, replica: Replica) -> Workload:
    """A revision on Kubernetes: one workload of kind "service" whose pods the cluster scales.

    mode "kserve" (the cluster has KServe): an InferenceService with the model's format and its storage URI, run as
    PORTAL_SERVING_KSERVE_MODE says (frozen in the revision): Serverless scales on concurrency (or CPU),
    RawDeployment on CPU only (an HPA; the target is then the default utilisation unless the metric was CPU).
    mode "deployment": our model server's image in a Deployment + Service, and an HPA on CPU when max > min (a
    plain HPA cannot see concurrency: the target is then the default utilisation)."""
    config = revision.config
    min_replicas = max(int(config.get("min_replicas") or 1), 1)
    max_replicas = max(int(config.get("max_replicas") or 1), min_replicas)
    metric, target = config.get("scale_metric") or "concurrency", config.get("scale_target") or None
    common: dict[str, Any] = {
        "uid": f"svc-{service.pk}-r{revision.number}-{replica.pk}",  # a replacement (or a restart) is a new one
        "name": f"{service.project.slug}-{service.name}-r{revision.number}",
        "project": service.project.slug,
        "kind": "service",
        "framework": str(config.get("framework") or ""),
        "env": _env(service, revision, config),
        "resources": _resources(config),
        "labels": _labels(service, revision, replica),
        "cluster": str(config.get("cluster") or ""),
        "namespace": str(config.get("namespace") or ""),
    }
    if config.get("mode") == "kserve":
        deployment_mode = str(config.get("kserve_mode") or "RawDeployment")
        scaled_on = "cpu" if metric == "cpu" or deployment_mode == "RawDeployment" else "concurrency"
        service_spec = {
            "mode": "kserve", "deployment_mode": deployment_mode,
            "min_replicas": min_replicas, "max_replicas": max_replicas,
            "scale_metric": scaled_on, "scale_target": target if scaled_on == metric else None,
            "model_format": kserve_format(config),
            "storage_uri": config.get("storage_uri") or "",
        }  # fmt: skip
        return Workload(**common, command=[], image="", service=service_spec)
    if config.get("framework") == Framework.CUSTOM:
        values = {"port": str(CLUSTER_PORT), "model": str(config.get("model_path") or "")}
        command = [_fill(str(token), values) for token in config.get("command") or []]
    else:
        command = server_command(
            config, python="{python}", host="0.0.0.0", port=CLUSTER_PORT, model_path=str(config.get("model_path") or "")
        )  # nosec B104 (inside its own pod)
    service_spec = {
        "mode": "deployment", "min_replicas": min_replicas, "max_replicas": max_replicas,
        "scale_metric": "cpu", "scale_target": target if metric == "cpu" else None,
    }  # fmt: skip
    # The train environment's replicas (pytorch, onnx) need the portal's training image (docs/kubernetes.md).
    portal_image = settings.PORTAL_TRAIN_IMAGE if TRAIN_PYTHON in command else settings.PORTAL_IMAGE
    image = str(config.get("image") or portal_image)
    return Workload(**common, command=command, image=image, ports={"http": CLUSTER_PORT}, service=service_spec)


def cluster_upstream(workload: Workload) -> str:
    """Where the router reaches a revision on the cluster: its Service (KServe names the predictor's)."""
    from apps.runtime.kubernetes.manifests.meta import object_name

    name, namespace = object_name(workload), workload.namespace or "default"
    if workload.service.get("mode") == "kserve":
        return f"http://{name}-predictor.{namespace}.svc:80"
    return f"http://{name}.{namespace}.svc:{CLUSTER_PORT}"


# --- Start, stop, ask ---------------------------------------------------------------------------------------------


def stop_replicas(replicas: list[Replica], reason: str = "", *, drain: bool = True) -> None:
    """Take replicas out of the routing table at once (STOPPING) and stop their processes after the drain delay
    (requests the router already sent them finish; a router's cached table forgets them meanwhile). Without
    `drain`, or with a zero delay, they are cancelled at once (the agent hears of it when the caller commits)."""
    ids = [r.pk for r in replicas if r.status in LIVE]
    if not ids:
        return
    now = timezone.now()
    Replica.objects.filter(pk__in=ids, status__in=LIVE).update(
        status=Replica.Status.STOPPING, stop_requested_at=now, reason=reason[:2000]
    )
    delay = settings.PORTAL_SERVING_DRAIN_SECONDS if drain else 0
    if delay <= 0:
        cancel_due(ids, force=True)  # the runtime's rows change with ours; the agent is woken on commit
        return

    from apps.outbox.services import enqueue
    from apps.serving.tasks import cancel_replicas

    enqueue(cancel_replicas, ids, countdown=delay)  # the reconcile pass also cancels drained replicas


def cancel_due(ids: list[int] | None = None, *, force: bool = False) -> int:
    """Cancel the workloads of STOPPING replicas that have drained (all of `ids` with `force`), and record the end of
    those the runtime already finished (a workload no agent had claimed is cancelled without an event)."""
    from apps.serving.services.rollout import record_end

    qs = Replica.objects.filter(status=Replica.Status.STOPPING).select_related("revision")
    if ids is not None:
        qs = qs.filter(pk__in=ids)
    if not force:
        qs = qs.filter(stop_requested_at__lte=timezone.now() - timedelta(seconds=settings.PORTAL_SERVING_DRAIN_SECONDS))
    cancelled = 0
    for replica in qs:
        if not replica.handle:
            Replica.objects.filter(pk=replica.pk, status=Replica.Status.STOPPING).update(
                status=Replica.Status.STOPPED, stopped_at=timezone.now()
            )
            continue
        runtime = get_runtime(replica.revision.config.get("runtime") or "local")
        runtime.cancel(replica.handle)
        cancelled += 1
        status: Status = runtime.poll(replica.handle)
        if status.phase.finished:
            record_end(replica.pk, replica.handle, status, then_advance=False)
    return cancelled


def meaningful_line(log_tail: str) -> str:
    """The last line of a replica's output that says what went wrong (else its last line)."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    for line in reversed(lines[-40:]):
        if _ERROR_LINE.search(line) and not line.startswith("File "):
            return line[:500]
    return lines[-1][:500] if lines else ""


def probe_ready(upstream: str) -> bool:
    """Whether the server at `upstream` answers /v2/health/ready with 200 (one short request)."""
    if not upstream:
        return False
    try:
        return requests.get(f"{upstream}/v2/health/ready", timeout=READY_TIMEOUT).status_code == 200
    except requests.RequestException:
        return False
