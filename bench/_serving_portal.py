"""The `portal` target of bench/serving.py: a throwaway portal that serves the benchmark's own saved model.

A fresh PostgreSQL database and Redis prefix (`_env.prepare("serving")`), a user, a project, the MLflow Model
folder the other targets serve copied into a tracking run's artifacts and registered as version 1 of
`iris-classifier` (what `mlflow.log_model` + `register_model` leave behind), and an inference service `iris` on it
with min = max replicas = `--workers` (one model-server process each; the autoscaler cannot change the count).
Then the processes the Procfile runs: uvicorn on `portal.asgi:application` (the router), the local agent
(`manage.py runagent`, which starts the replicas), a Celery worker (readiness probes) and beat (the periodic
reconcile). The service is deployed through `apps.serving.services`, and the benchmark waits until it is READY
with every replica ready. Calls go through `/serving/bench/iris/…` with a read-only token limited to the project.

Every portal process is pinned to the server CPU set: the replicas inherit the agent's affinity. At the end the
service is stopped and every process started here is stopped by its PID (the replicas' too, should the agent
have left any), also after a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _env import PYTHON, ROOT, prepare, stop, wait_for

PROJECT, SERVICE, MODEL = "bench", "iris", "iris-classifier"
READY_SECONDS = 240  # the replicas import scikit-learn on a loaded 2-core machine


@dataclass
class Portal:
    """What bench/serving.py needs to call the served model, and what to say about it."""

    url: str  # …/serving/<project>/<service>
    headers: dict[str, str]
    replicas: int
    deploy_s: float  # from deploy() to READY with every replica ready
    replica_pids: list[int] = field(default_factory=list)
    replica_cpus: list[list[int]] = field(default_factory=list)
    router_pid: int = 0  # the portal's uvicorn (taskset execs it: the Popen's pid)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def register_model(model_dir: Path):
    """The user, project, tracking run and model version (the saved MLflow Model folder as the run's `model`)."""
    from django.contrib.auth import get_user_model

    from apps.accounts.models import ApiToken
    from apps.accounts.services import create_token
    from apps.models import artifacts
    from apps.models.registry import create_model_version, create_registered_model
    from apps.models.services import create_experiment, create_run, update_run
    from apps.projects.services import create_project

    owner = get_user_model().objects.create_user(username="bench")
    project = create_project(owner, slug=PROJECT, name="Bench")
    run = create_run(create_experiment(project, "serving-bench"), user=owner, run_name="iris")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        with path.open("rb") as stream:
            artifacts.save(f"{base}/model/{path.relative_to(model_dir).as_posix()}", stream)
    update_run(run, status="FINISHED", end_time=int(time.time() * 1000))
    version = create_model_version(
        create_registered_model(project, MODEL), source=f"runs:/{run.run_uuid}/model", run=run
    )
    token = create_token(owner, name="bench", project=project, scope=ApiToken.Scope.READ)[1]
    return owner, project, version, token


def _start(command: list[str], log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def _check_alive(procs: dict[str, subprocess.Popen], logs: Path) -> None:
    for name, proc in procs.items():
        if proc.poll() is not None:
            raise RuntimeError(f"the portal's {name} exited ({proc.returncode}):\n{_tail(logs / f'{name}.log')}")


def _wait_serving(service, replicas: int, procs: dict[str, subprocess.Popen], logs: Path) -> list:
    """Until the service is READY with `replicas` ready replicas of its current revision; those replicas."""
    from apps.serving.models import InferenceService, Replica, Revision

    deadline = time.monotonic() + READY_SECONDS
    while True:
        _check_alive(procs, logs)
        service.refresh_from_db()
        current = service.current_revision
        ready = list(current.replicas.filter(status=Replica.Status.READY)) if current else []
        if service.status == InferenceService.Status.READY and len(ready) == replicas:
            return ready
        failed = service.revisions.filter(status=Revision.Status.FAILED).first()
        if failed is not None or service.status == InferenceService.Status.FAILED:
            raise RuntimeError(f"the portal's service failed: {service.reason} {failed.reason if failed else ''}")
        if time.monotonic() > deadline:
            rows = list(Replica.objects.filter(revision__service=service).values("index", "status", "reason"))
            raise TimeoutError(f"the service is {service.status} ({service.reason}) after {READY_SECONDS} s: {rows}")
        time.sleep(0.2)


def _replica_pids(replicas: list) -> list[int]:
    from apps.runtime.models import LocalWorkload

    handles = [r.handle for r in replicas if r.handle]
    return [int(pid) for pids in LocalWorkload.objects.filter(uid__in=handles).values_list("pids", flat=True)
            for pid in (pids or {}).values()]  # fmt: skip


def _kill_leftover_replicas(service) -> None:
    """The agent stops its replicas when it stops; a model server it left behind is ended here by its PID."""
    import psutil

    from apps.serving.models import Replica

    for pid in _replica_pids(list(Replica.objects.filter(revision__service=service))):
        try:
            proc = psutil.Process(pid)
            if "apps.serving.modelserver" in " ".join(proc.cmdline()):
                proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue


@contextmanager
def running_portal(model_dir: Path, replicas: int, pin: list[str], logs: Path) -> Iterator[Portal]:
    """A portal serving the MLflow Model in `model_dir` with `replicas` model-server processes, its processes pinned
    with the taskset prefix `pin`; their output in `logs` (the router's in `portal.log`)."""
    var = prepare("serving")
    from apps.runtime.local.runtime import live_agents
    from apps.serving.services import create_service, deploy, stop_service
    from portal.celery import worker_command

    owner, project, version, token = register_model(model_dir)
    service = create_service(
        project, owner, name=SERVICE, registered_model=version.registered_model, model_version=version.version,
        cpu="0.5", memory="512Mi", min_replicas=replicas, max_replicas=replicas,
    )  # fmt: skip
    port = _free_port()
    procs: dict[str, subprocess.Popen] = {}
    deployed = False
    try:
        # As the Procfile runs them (the worker and agent keep their database connections).
        web = [PYTHON, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
               "--no-server-header"]  # fmt: skip
        procs["portal"] = _start([*pin, *web], logs / "portal.log")
        procs["agent"] = _start([*pin, PYTHON, "manage.py", "runagent"], logs / "agent.log", DB_CONN_MAX_AGE="300")
        worker = worker_command(concurrency=2, lone=False)
        procs["worker"] = _start([*pin, *worker], logs / "worker.log", DB_CONN_MAX_AGE="300")
        beat = [PYTHON, "-m", "celery", "-A", "portal", "beat", "--loglevel", "WARNING"]
        procs["beat"] = _start([*pin, *beat], logs / "beat.log")
        wait_for(lambda: _check_alive(procs, logs) or _port_open(port), timeout=120, what="the portal's uvicorn")
        wait_for(lambda: _check_alive(procs, logs) or live_agents().exists(), timeout=120, what="the local agent")
        started = time.monotonic()
        deploy(service, owner)
        deployed = True
        ready = _wait_serving(service, replicas, procs, logs)
        deploy_s = time.monotonic() - started
        pids = _replica_pids(ready)
        import psutil

        cpus = []
        for pid in pids:
            try:
                cpus.append(sorted(psutil.Process(pid).cpu_affinity()))
            except psutil.Error:
                cpus.append([])
        yield Portal(
            url=f"http://127.0.0.1:{port}/serving/{project.slug}/{service.name}",
            headers={"Authorization": f"Bearer {token}"},
            replicas=len(ready),
            deploy_s=round(deploy_s, 2),
            replica_pids=pids,
            replica_cpus=cpus,
            router_pid=procs["portal"].pid,
        )
    finally:
        if deployed:
            try:
                stop_service(service, "benchmark over")
            except Exception as exc:  # the processes are stopped below whatever happened here
                print(f"portal: could not stop the service cleanly: {exc}", flush=True)
        stop(*procs.values())
        _kill_leftover_replicas(service)
        shutil.rmtree(var, ignore_errors=True)
