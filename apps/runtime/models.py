"""State of the runtimes: local agents and their workloads; Kubernetes clusters, project bindings, workloads."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from portal.lib.asynccommit import unflushed
from portal.lib.fields import EncryptedText


def heartbeat_cutoff():
    """Agents whose last heartbeat is older than this are dead (PORTAL_AGENT_TIMEOUT)."""
    return timezone.now() - timedelta(seconds=settings.PORTAL_AGENT_TIMEOUT)


def progress_marker() -> AbstractContextManager[None]:
    """A transaction for a write that only marks progress a later write supersedes (a workload or task
    "running"), or whose loss in a crash of the database server costs little (stored log lines): its commit does
    not wait for PostgreSQL's WAL flush (`portal.lib.asynccommit.unflushed`), a few milliseconds per commit on a
    slow disk, paid on every task's start and every batch of log lines.

    What follows a loss repairs it: the next durable commit (the task's end) flushes it anyway, and an end that
    never comes is what the reconcile loop handles. Never for a write a decision rests on.
    """
    return unflushed()


class Agent(models.Model):
    """A running `manage.py runagent` (kind "local") or `manage.py runkube` (kind "kubernetes"). Its heartbeat
    tells the portal it is alive and (an agent) what it has free."""

    class Kind(models.TextChoices):
        LOCAL = "local"
        KUBERNETES = "kubernetes"

    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.LOCAL, db_index=True)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    address = models.CharField(max_length=100, blank=True, help_text="host:port it listens on for wake-ups")
    capacity = models.JSONField(default=dict)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now, db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-heartbeat_at"]

    def __str__(self) -> str:
        return f"agent {self.hostname}:{self.pid}"


class WorkloadRow(models.Model):
    """A workload of a runtime that keeps its workloads as rows (apps/runtime/rows.py): written by submit, in the
    submitter's transaction; made real by a long-lived process of the portal (the local agent, the Kubernetes
    controller), which records how it goes. The row is the intent; everything is level-triggered from it."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"

    uid = models.CharField(max_length=100, unique=True)
    spec = models.JSONField()
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING, db_index=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return self.uid


class LocalWorkload(WorkloadRow):
    """A workload for the local runtime: submitted by the orchestrator, claimed and run by an agent."""

    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="workloads")
    pids = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)

    class Meta(WorkloadRow.Meta):
        pass


class DispatchLock(models.Model):
    """A single row the dispatcher locks, so that two workers never hand out the same capacity."""

    class Meta:
        verbose_name = "dispatch lock"

    def __str__(self) -> str:
        return "dispatch lock"


class Operator(models.TextChoices):
    """Controllers a cluster may have installed; a workload kind that needs a missing one is refused."""

    TRAINING = "training-operator", _("Kubeflow training operator")
    VOLCANO = "volcano", "Volcano"
    KSERVE = "kserve", "KServe"
    KUBERAY = "kuberay", "KubeRay"
    SPARK = "spark-operator", _("Spark operator")


class Placement(models.TextChoices):
    """How a cluster's scheduler chooses nodes for the portal's pods (docs/scheduling.md, "Bin-packing against
    spreading")."""

    SPREAD = "spread", _("Spread: the cluster's default scheduler")
    PACK = "pack", _("Pack: a bin-packing scheduler profile")


PACK_SCHEDULER = "portal-binpack"  # the profile k8s/scheduler/ ships


class Cluster(models.Model):
    """A Kubernetes cluster the `kubernetes` runtime can run workloads on.

    The kubeconfig is encrypted at rest (Fernet, keys derived from SECRET_KEY; SECRET_KEY_FALLBACKS still
    decrypt after a rotation). `in_cluster` uses the pod's service account instead.
    """

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    in_cluster = models.BooleanField(
        default=False, help_text=_("use the service account of the pod the portal runs in")
    )
    # Null: the encrypted field stores "" as NULL (in-cluster clusters have no kubeconfig).
    kubeconfig = EncryptedText(blank=True, null=True, help_text=_("kubeconfig YAML (stored encrypted)"))
    context = models.CharField(max_length=200, blank=True, help_text=_("kubeconfig context; empty = current-context"))
    version = models.CharField(max_length=10, default="1.33", help_text=_("Kubernetes minor version, e.g. 1.33"))
    default_namespace = models.CharField(max_length=63, default="default")
    node_selector = models.JSONField(default=dict, blank=True, help_text=_("added to every pod, e.g. a resource group"))
    resource_group_label = models.CharField(max_length=200, default="portal.io/resource-group", blank=True)
    gpu_resource = models.CharField(max_length=200, default="nvidia.com/gpu")
    gpu_type_label = models.CharField(
        max_length=200, default="gpu-type", help_text=_("node label naming the GPU model")
    )
    vgpu_resources = models.JSONField(
        default=dict, blank=True, help_text=_('vGPU resource names, e.g. {"memory": "nvidia.com/gpumem"}')
    )
    rdma_resource = models.CharField(max_length=200, blank=True, help_text=_("e.g. rdma/hca; empty = no RDMA"))
    operators = models.JSONField(
        default=list,
        blank=True,
        help_text=format_lazy(_("installed: {operators}"), operators=", ".join(Operator.values)),
    )
    volcano_queue = models.CharField(max_length=63, default="default")
    priority_classes = models.BooleanField(
        default=False,
        help_text=_(
            "k8s/priorityclasses/ is applied here: tasks' pods name the priority class of their run's priority"
        ),
    )
    placement = models.CharField(
        max_length=10,
        choices=Placement.choices,
        default=Placement.SPREAD,
        help_text=_(
            "spread: pods name no scheduler (Kubernetes' default spreads them over the least allocated nodes); pack: "
            "pods name the bin-packing scheduler below, which fills partly used nodes first and keeps whole nodes "
            "free for multi-node jobs"
        ),
    )
    pack_scheduler_name = models.CharField(
        max_length=63,
        default=PACK_SCHEDULER,
        help_text=_(
            "scheduler profile that packs (k8s/scheduler/ ships portal-binpack); Volcano jobs keep Volcano, which "
            "packs with its binpack plugin"
        ),
    )
    work_volume_claim = models.CharField(
        max_length=253,
        blank=True,
        help_text=_(
            "ReadWriteMany PVC mounted at PORTAL_WORK_DIR in every pod: task outputs and inputs pass through it"
        ),
    )
    enabled = models.BooleanField(default=True)
    # What the controller last read of the cluster's nodes (allocatable, requested, GPUs), for the cluster page.
    inventory = models.JSONField(default=dict, blank=True)
    inventory_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def has_operator(self, operator: str) -> bool:
        return operator in (self.operators or [])

    @property
    def scheduler_name(self) -> str:
        """The scheduler the portal's pods name here: the packing one under "pack"; "" (the default) otherwise."""
        return self.pack_scheduler_name if self.placement == Placement.PACK else ""


class ProjectCluster(models.Model):
    """A project may run on this cluster, in this namespace. The default binding is tried first."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="cluster_bindings")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="bindings")
    namespace = models.CharField(max_length=63, blank=True, help_text=_("empty = the cluster's default namespace"))
    is_default = models.BooleanField(default=False)

    class Meta:
        ordering = ["-is_default", "cluster__name"]
        constraints = [models.UniqueConstraint(fields=["project", "cluster"], name="runtime_projectcluster_unique")]

    def __str__(self) -> str:
        return f"{self.project} on {self.cluster}"

    @property
    def effective_namespace(self) -> str:
        return self.namespace or self.cluster.default_namespace


class KubeWorkload(WorkloadRow):
    """A workload for the `kubernetes` runtime: written by submit (in the dispatcher's transaction), realised on
    the cluster by the controller (`manage.py runkube`), which records what it created and what it watches.

    The objects' names derive from `uid`, so creating them again after a crash finds them (409) and adopts them.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="workloads")
    namespace = models.CharField(max_length=63)
    # [{"apiVersion", "kind", "name"}] of what was applied, the primary object first.
    applied = models.JSONField(default=list, blank=True)
    created = models.BooleanField(default=False, help_text="all objects exist on the cluster")
    replicas = models.JSONField(default=dict, blank=True, help_text="replica → pod phase")
    # pod → [time of the last log line handed to the listener (ns since the epoch), lines at that time]: where a
    # restarted controller resumes each pod's log (apps/runtime/kubernetes/podlogs.py).
    log_cursors = models.JSONField(default=dict, blank=True)

    class Meta(WorkloadRow.Meta):
        pass
