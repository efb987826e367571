"""Rows the dashboards and the capacity page summarise: pipeline runs and task attempts as the orchestrator leaves
them, notebooks, inference services and their replicas, and the runtime's workload rows with the labels and the
resources the dispatcher, the notebook launcher and the serving rollout give them."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any

import factory
from django.utils import timezone

from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.notebooks.models import Notebook
from apps.runtime.models import Agent, Cluster, KubeWorkload, LocalWorkload
from apps.serving.models import InferenceService, Replica, Revision


class PipelineRunFactory(factory.django.DjangoModelFactory):
    """A run of a three-node pipeline; `nodes` names its nodes."""

    class Meta:
        model = PipelineRun
        exclude = ["nodes"]

    nodes = ("prepare", "train", "evaluate")
    pipeline_name = "train"
    number = factory.Sequence(lambda n: n + 1)
    spec = factory.LazyAttribute(lambda o: {"nodes": [{"name": name, "template": "py"} for name in o.nodes]})
    status = RunStatus.SUCCEEDED
    created_at = factory.LazyFunction(timezone.now)


class TaskRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TaskRun

    run = factory.SubFactory(PipelineRunFactory)
    node = "train"
    status = TaskStatus.SUCCEEDED
    created_at = factory.LazyFunction(timezone.now)
    finished_at = factory.LazyAttribute(
        lambda o: (
            timezone.now() if o.status not in (TaskStatus.WAITING, TaskStatus.QUEUED, TaskStatus.RUNNING) else None
        )
    )


class NotebookFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Notebook

    name = factory.Sequence(lambda n: f"nb-{n}")
    cpu = "0.5"
    memory_bytes = 512 * 2**20


class ServiceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = InferenceService

    name = factory.Sequence(lambda n: f"svc-{n}")
    status = InferenceService.Status.READY


def replica(service: InferenceService, *, number: int = 1, index: int = 0, user=None) -> Replica:
    revision, _ = Revision.objects.get_or_create(
        service=service, number=number, defaults={"created_by": user, "status": Revision.Status.READY}
    )
    return Replica.objects.create(revision=revision, index=index, status=Replica.Status.READY)


def agent(*, hostname: str = "", cpu: float = 16, memory_bytes: int = 64 * 2**30, gpus: int = 0, **fields) -> Agent:
    """A live local agent with this capacity (GPUs named as nvidia-smi reports them)."""
    gpu_list = [{"index": i, "name": "NVIDIA H100", "memory_bytes": 80 * 2**30} for i in range(gpus)]
    return Agent.objects.create(
        hostname=hostname or socket.gethostname(),
        pid=fields.pop("pid", os.getpid()),
        address="127.0.0.1:9",
        capacity={"cpu": cpu, "memory_bytes": memory_bytes, "gpu": gpus, "gpus": gpu_list},
        **fields,
    )


def dead_agent(**kwargs) -> Agent:
    return agent(heartbeat_at=timezone.now() - timedelta(hours=1), **kwargs)


def _spec(project, kind: str, labels: dict[str, str], cpu: float, memory: int, gpu: float, **extra: Any) -> dict:
    return {
        "uid": "",
        "name": "w",
        "project": project.slug,
        "command": ["true"],
        "kind": kind,
        "env": {"SECRET_THING": "never read"},
        "resources": {"cpu": cpu, "memory_bytes": memory, "gpu": gpu, "gpu_type": "", "vgpu": {}},
        "labels": {"project": project.slug, **labels},
        **extra,
    }


def task_workload(task: TaskRun, *, on=None, cpu=2.0, memory=4 * 2**30, gpu=0.0, replicas=None, cluster=None):
    """The runtime row of a task attempt, as the dispatcher submits it (`on`: the agent that claimed it)."""
    labels = {"task_run": str(task.pk), "run": str(task.run_id)}
    kind = "distributed" if replicas else "job"
    spec = _spec(task.run.project, kind, labels, cpu, memory, gpu, replicas=replicas or {})
    return _workload(f"task-{task.pk}", spec, on, cluster)


def notebook_workload(nb: Notebook, *, on=None, cluster=None):
    labels = {"notebook": str(nb.pk), "owner": nb.owner.username}
    spec = _spec(nb.project, "notebook", labels, float(nb.cpu), int(nb.memory_bytes), float(nb.gpu))
    return _workload(f"notebook-{nb.pk}-1", spec, on, cluster)


def replica_workload(rep: Replica, *, on=None, cpu=1.0, memory=2**30, gpu=1.0, cluster=None):
    service = rep.revision.service
    labels = {"serving_replica": str(rep.pk), "service": service.name, "revision": str(rep.revision.number)}
    spec = _spec(service.project, "service", labels, cpu, memory, gpu)
    return _workload(f"serving-{rep.pk}", spec, on, cluster)


def _workload(uid: str, spec: dict, on: Agent | None, cluster: Cluster | None):
    spec["uid"] = uid
    if cluster is not None:
        return KubeWorkload.objects.create(
            uid=uid, cluster=cluster, namespace="ml", spec=spec, state=KubeWorkload.State.RUNNING
        )
    state = LocalWorkload.State.RUNNING if on is not None else LocalWorkload.State.PENDING
    return LocalWorkload.objects.create(uid=uid, spec=spec, agent=on, state=state, started_at=timezone.now())
