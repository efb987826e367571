"""How a revision's replicas are hosted: the one place where serving differs by the kind of runtime it runs on.

- `LocalReplicas` (a runtime of processes on this machine): every replica is one model-server process, a workload
  of its own; the portal starts as many as the revision wants, probes each one's readiness endpoint and autoscales
  them (apps/serving/autoscale.py). The model is read where the artifact storage keeps it when that is a local
  folder.
- `ClusterService` (a runtime on a cluster): a revision is one workload of kind "service" (a Deployment + Service
  + HPA, or a KServe InferenceService), whose single Replica row stands for all its pods; the cluster's readiness
  probe and autoscaler own them, and the runtime reports the workload running once it is ready. The model is
  copied into the work folder every pod mounts.

The strategy follows the runtime the revision was deployed on (`revision.config["runtime"]`, the project's when it
was deployed), by what that runtime declares (`Runtime.on_cluster`), never by its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.runtime.base import Runtime, get_runtime
from apps.runtime.models import Cluster, LocalWorkload, Operator
from apps.runtime.workload import Workload
from apps.serving import replicas as replica_ops
from apps.serving.models import Framework, InferenceService, Replica, Revision


class Hosting(ABC):
    """What differs between hosting a revision as replica processes and as one cluster service."""

    #: The portal probes each starting replica's readiness endpoint itself (apps/serving/services/rollout.py,
    #: check_starting). False: the runtime reports the workload running once the cluster found it ready.
    probes_readiness: bool
    #: The portal's autoscaler decides how many replicas run (apps/serving/autoscale.py). False: the cluster's own.
    autoscaled_here: bool

    @abstractmethod
    def placement(self, service: InferenceService, runtime: str, cluster: str, namespace: str) -> dict[str, Any]:
        """Where and how a new revision runs (frozen into its config). ValidationError when it cannot run now."""

    def model_path(self, service: InferenceService, number: int, source: str) -> str:
        """The path the revision's model server loads the model version `source` from."""
        return str(replica_ops.materialise(source, replica_ops.revision_dir(service, number) / "model"))

    @abstractmethod
    def complete_config(self, config: dict[str, Any], has_version: bool) -> None:
        """Add what the frozen config needs beyond the model's path; ValidationError when the revision could not
        read its model there."""

    @abstractmethod
    def wanted_replicas(self, revision: Revision) -> int:
        """How many Replica rows the revision keeps live."""

    def to_start(self, revision: Revision, count: int) -> int:
        """How many of `count` more replicas get a workload of their own."""
        return count

    @abstractmethod
    def workload(self, service: InferenceService, revision: Revision, replica: Replica) -> tuple[Workload, str]:
        """(the workload of one Replica row, the upstream the router reaches it at, "" while unknown)."""

    def any_process_started(self, replicas: list[Replica]) -> bool:
        """Whether the runtime started anything of the live `replicas` (a rollout that timed out with nothing
        started waits for the infrastructure instead of failing the revision)."""
        return True

    def timeout_detail(self, waiting: list[Replica]) -> str:
        """What to add to the reason of a rollout whose `waiting` replicas did not get ready in time."""
        return ""

    def start_replicas(self, revision: Revision, count: int) -> list[Replica]:
        """Start `count` more replicas of `revision` (inside the caller's transaction: the runtime's rows commit with
        ours)."""
        count = self.to_start(revision, count)
        if count <= 0:
            return []
        service = revision.service
        runtime = runtime_of(revision)
        last = revision.replicas.order_by("-index").values_list("index", flat=True).first()
        first = 0 if last is None else last + 1
        started = []
        for index in range(first, first + count):
            replica = Replica.objects.create(revision=revision, index=index, status=Replica.Status.STARTING)
            workload, upstream = self.workload(service, revision, replica)
            replica.handle = runtime.submit(workload)
            replica.upstream = upstream
            replica.save(update_fields=["handle", "upstream"])
            started.append(replica)
        return started


class LocalReplicas(Hosting):
    probes_readiness = True
    autoscaled_here = True

    def placement(self, service: InferenceService, runtime: str, cluster: str, namespace: str) -> dict[str, Any]:
        if not get_runtime(runtime).ready():
            raise ValidationError(_("No agent is running on this machine (start it with `manage.py runagent`)."))
        return {"runtime": runtime, "cluster": "", "namespace": "", "mode": "local"}

    def model_path(self, service: InferenceService, number: int, source: str) -> str:
        # Where the artifact storage keeps it, when that is a local folder (nothing is copied); else a copy.
        return replica_ops.local_model_path(source) or super().model_path(service, number, source)

    def complete_config(self, config: dict[str, Any], has_version: bool) -> None:
        """Nothing more: a local replica is given the model's path on its command line."""

    def wanted_replicas(self, revision: Revision) -> int:
        return max(revision.desired_replicas, 1)

    def workload(self, service: InferenceService, revision: Revision, replica: Replica) -> tuple[Workload, str]:
        return replica_ops.local_workload(service, revision, replica)

    def any_process_started(self, replicas: list[Replica]) -> bool:
        handles = [r.handle for r in replicas if r.status in replica_ops.LIVE and r.handle]
        return not handles or LocalWorkload.objects.filter(uid__in=handles).exclude(started_at=None).exists()

    def timeout_detail(self, waiting: list[Replica]) -> str:
        started = LocalWorkload.objects.filter(uid__in=[r.handle for r in waiting]).exclude(started_at=None).count()
        if not started:
            return _(": no replica process was started (is an agent running? `manage.py runagent`)")
        line = replica_ops.meaningful_line(waiting[0].log_tail)
        return f": {line}" if line else ""


class ClusterService(Hosting):
    probes_readiness = False
    autoscaled_here = False

    def placement(self, service: InferenceService, runtime: str, cluster: str, namespace: str) -> dict[str, Any]:
        found = Cluster.objects.get(name=cluster)
        # KServe picks a runtime by model format; a custom server and an llm service (our OpenAI-compatible chat
        # server) run as a Deployment of their own command instead.
        own_command = service.framework in (Framework.CUSTOM, Framework.LLM)
        kserve = Operator.KSERVE in (found.operators or []) and not own_command
        return {
            "runtime": runtime, "cluster": found.name, "namespace": namespace,
            "mode": "kserve" if kserve else "deployment",
            "kserve_mode": settings.PORTAL_SERVING_KSERVE_MODE if kserve else "",
            "work_claim": found.work_volume_claim, "work_dir": str(settings.PORTAL_WORK_DIR),
        }  # fmt: skip

    def complete_config(self, config: dict[str, Any], has_version: bool) -> None:
        work_dir, work_claim = config.get("work_dir", ""), config.get("work_claim", "")
        config["storage_uri"] = replica_ops.storage_uri(config, work_dir, work_claim)
        if config["mode"] == "deployment" and has_version and not work_claim:
            raise ValidationError(
                _("Cluster %(c)s has no work volume claim, so its pods cannot read the model.")
                % {"c": config["cluster"]}
            )

    def wanted_replicas(self, revision: Revision) -> int:
        return 1  # one row stands for the cluster's pods

    def to_start(self, revision: Revision, count: int) -> int:
        return 0 if revision.replicas.filter(status__in=replica_ops.LIVE).exists() else 1  # whatever `count`

    def workload(self, service: InferenceService, revision: Revision, replica: Replica) -> tuple[Workload, str]:
        workload = replica_ops.cluster_workload(service, revision, replica)
        return workload, replica_ops.cluster_upstream(workload)


LOCAL, CLUSTER = LocalReplicas(), ClusterService()


def runtime_of(revision: Revision) -> Runtime:
    return get_runtime(revision.config.get("runtime") or "local")


def hosting_for(runtime: str) -> Hosting:
    """The hosting of revisions on runtime `runtime` (a name from RUNTIMES)."""
    return CLUSTER if get_runtime(runtime).on_cluster else LOCAL


def hosting_of(revision: Revision) -> Hosting:
    return hosting_for(revision.config.get("runtime") or "local")


def start_replicas(revision: Revision, count: int) -> list[Replica]:
    """Start `count` more replicas of `revision` as its hosting does (on a cluster: its one row, if not live)."""
    return hosting_of(revision).start_replicas(revision, count)
