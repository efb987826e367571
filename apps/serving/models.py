"""Inference services, their immutable revisions, and the replicas that serve a revision.

A service says what should be served (a model version, or the version an alias points at, or a custom image and
command) and how (resources, replicas and autoscaling, canary and shadow traffic, auth). Every change of what is
served makes a new `Revision` — an immutable deploy record (who, when, which version, the frozen config) — so
history is a list of revisions and rollback is "make the old revision current again". On the local runtime each
replica of a revision is a model-server process (apps.serving.modelserver) run by the agent; on Kubernetes a
revision is a KServe InferenceService or a Deployment + Service + HPA.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.querysets import TenantQuerySet


class Framework(models.TextChoices):
    SKLEARN = "sklearn", "scikit-learn"
    XGBOOST = "xgboost", "XGBoost"
    PYTORCH = "pytorch", "PyTorch"
    ONNX = "onnx", "ONNX"
    MLFLOW = "mlflow", _("MLflow pyfunc")
    # A chat model answering OpenAI's /v1/chat/completions (apps/serving/modelserver/chat.py): the packaged
    # SmolLM2-135M-Instruct unless a registered model version (a Hugging Face folder or a LoRA adapter) is given.
    LLM = "llm", _("LLM chat (OpenAI-compatible)")
    CUSTOM = "custom", _("Custom image and command")


class InferenceService(models.Model):
    """A model served as a REST service at `/serving/<project>/<name>/` (OIP v2 beneath it; an `llm` service
    answers OpenAI's /v1/chat/completions there)."""

    class Stage(models.TextChoices):
        DEBUG = "debug", _("Debug")
        TEST = "test", _("Test")
        PROD = "prod", _("Production")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")  # saved, nothing deployed yet
        DEPLOYING = "deploying", _("Deploying")  # a revision is rolling out
        READY = "ready", _("Ready")  # the current revision serves with at least one ready replica
        DEGRADED = "degraded", _("Degraded")  # serving, but fewer replicas ready than wanted
        FAILED = "failed", _("Failed")  # nothing can serve (the reason says why)
        STOPPED = "stopped", _("Stopped")  # scaled to nothing by the user

    class ScaleMetric(models.TextChoices):
        CONCURRENCY = "concurrency", _("Concurrent requests per replica")
        CPU = "cpu", _("CPU utilisation (%)")

    class Auth(models.TextChoices):
        TOKEN = "token", _("Portal API token of a project member")
        KEY = "key", _("Service key, or a portal token")
        PUBLIC = "public", _("None (anyone who can reach the portal)")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="inference_services")
    name = models.CharField(_("name"), max_length=50, validators=[slug_validator])
    description = models.TextField(_("description"), blank=True)
    stage = models.CharField(_("stage"), max_length=10, choices=Stage.choices, default=Stage.DEBUG)

    # What to serve: a pinned version, or the version an alias of a registered model points at (moving the alias
    # rolls the service), or a custom image + command (framework "custom").
    registered_model = models.ForeignKey(
        "models.RegisteredModel", on_delete=models.PROTECT, null=True, blank=True, related_name="services"
    )
    model_version = models.ForeignKey(
        "models.ModelVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="services"
    )
    follow_alias = models.CharField(_("alias to follow"), max_length=255, blank=True)
    framework = models.CharField(_("framework"), max_length=20, choices=Framework.choices, default=Framework.SKLEARN)
    image = models.CharField(_("image"), max_length=200, blank=True)  # "" = the portal's model-server image
    command = models.JSONField(_("command"), default=list, blank=True)  # custom only: argv; {port} is filled in
    env = models.JSONField(_("environment"), default=dict, blank=True)

    cpu = models.DecimalField(
        _("CPU cores"), max_digits=6, decimal_places=2, default=1, validators=[MinValueValidator(0)]
    )
    memory_bytes = models.BigIntegerField(_("memory (bytes)"), default=1024**3, validators=[MinValueValidator(0)])
    gpu = models.DecimalField(_("GPUs"), max_digits=5, decimal_places=2, default=0, validators=[MinValueValidator(0)])
    min_replicas = models.PositiveIntegerField(_("min replicas"), default=1)
    max_replicas = models.PositiveIntegerField(_("max replicas"), default=1, validators=[MinValueValidator(1)])
    scale_metric = models.CharField(
        _("autoscale on"), max_length=20, choices=ScaleMetric.choices, default=ScaleMetric.CONCURRENCY
    )
    scale_target = models.PositiveIntegerField(_("target per replica"), default=8, validators=[MinValueValidator(1)])

    # Traffic: the current revision takes what the canary does not; the shadow gets copies (its answers dropped).
    current_revision = models.ForeignKey("Revision", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    canary_revision = models.ForeignKey("Revision", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    canary_percent = models.PositiveSmallIntegerField(
        _("canary traffic (%)"), default=0, validators=[MaxValueValidator(100)]
    )
    shadow_revision = models.ForeignKey("Revision", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    shadow_percent = models.PositiveSmallIntegerField(
        _("shadow traffic (%)"), default=0, validators=[MaxValueValidator(100)]
    )

    auth = models.CharField(_("authentication"), max_length=10, choices=Auth.choices, default=Auth.TOKEN)
    key_prefix = models.CharField(max_length=12, blank=True)  # first characters of the service key, to recognise it
    key_digest = models.CharField(max_length=64, blank=True)  # SHA-256 of the service key (shown once)

    # Payload logging (apps/serving/payloads.py, docs/monitoring.md): the share of inference requests whose request
    # and answer the router keeps, the largest body kept (bigger ones keep their size only), and the rows kept per
    # revision (the oldest go first).
    payload_log_percent = models.PositiveSmallIntegerField(
        _("payload logging (percent of requests)"), default=0, validators=[MaxValueValidator(100)]
    )
    payload_log_max_kb = models.PositiveIntegerField(
        _("largest logged body (KiB)"), default=64, validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    payload_log_keep = models.PositiveIntegerField(
        _("logged requests kept per revision"),
        default=10_000,
        validators=[MinValueValidator(1), MaxValueValidator(1_000_000)],
    )

    runtime = models.CharField(max_length=20, blank=True)  # where it runs: local | kubernetes ("" = the project's)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(_("reason"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="serving_service_unique_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def base_path(self) -> str:
        return f"/serving/{self.project.slug}/{self.name}/"

    def replica_counts(self) -> tuple[int, int]:
        """(ready, wanted) replicas of the current revision (its replicas prefetched by the lists). A stopped
        service wants none, whatever its revision wanted before the stop (`start_service` asks again)."""
        revision = self.current_revision
        if revision is None:
            return 0, 0
        ready = sum(1 for r in revision.replicas.all() if r.status == Replica.Status.READY)
        wanted = 0 if self.status == self.Status.STOPPED else max(revision.desired_replicas, 1)
        return ready, wanted

    @staticmethod
    def generate_key() -> str:
        return "psk_" + secrets.token_urlsafe(32)


class Role(models.TextChoices):
    CURRENT = "current", _("Current")
    CANARY = "canary", _("Canary")
    SHADOW = "shadow", _("Shadow")


class Revision(models.Model):
    """Revision N of a service: an immutable record of what was deployed (the model version and the frozen config
    the replicas run with), by whom and when, and how its rollout went."""

    Role = Role

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        ROLLING_OUT = "rolling_out", _("Rolling out")  # replicas starting; not taking traffic until ready
        READY = "ready", _("Ready")  # serving (current, canary or shadow)
        FAILED = "failed", _("Failed")  # did not become ready (rolled back; reason says why)
        RETIRED = "retired", _("Retired")  # replaced; its replicas are gone

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    model_version = models.ForeignKey(
        "models.ModelVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Frozen at creation: framework, model path/URI, image, command, env, resources, replicas/autoscaling, and
    # anything else the replicas need. Never changed afterwards.
    config = models.JSONField(default=dict)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(_("reason"), blank=True)
    # What the revision is (or rolls out to become): the service's current revision, a canary or a shadow. The
    # service's pointers move only once its replicas are ready; until then this says where it is going.
    role = models.CharField(_("role"), max_length=10, choices=Role.choices, default=Role.CURRENT)
    traffic_percent = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])  # canary/shadow
    # The autoscaler's decision: how many replicas should run now (within the service's min/max), and since when
    # the measured load has wanted fewer (scale-down waits PORTAL_SERVING_SCALE_DOWN_DELAY seconds).
    desired_replicas = models.PositiveIntegerField(default=0)
    low_since = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "service__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["service", "-number"]
        constraints = [models.UniqueConstraint(fields=["service", "number"], name="serving_revision_unique_number")]

    def __str__(self) -> str:
        return f"{self.service.name} r{self.number}"

    @property
    def project(self):
        return self.service.project


class Replica(models.Model):
    """One model-server process (local runtime) of a revision: where it listens and whether it is ready. The
    router balances over the ready replicas of the revisions that take traffic."""

    class Status(models.TextChoices):
        STARTING = "starting", _("Starting")
        READY = "ready", _("Ready")
        STOPPING = "stopping", _("Stopping")
        STOPPED = "stopped", _("Stopped")
        FAILED = "failed", _("Failed")  # ended on its own: a crash, a bad model (counts against the revision)
        LOST = "lost", _("Lost")  # its agent died or shut down under it: not the model's doing (it is retried)

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="replicas")
    index = models.PositiveIntegerField()
    handle = models.CharField(max_length=200, blank=True)  # the runtime's handle of its workload
    upstream = models.CharField(max_length=200, blank=True)  # "http://127.0.0.1:41234"
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.STARTING)
    reason = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    ready_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)  # STOPPING: drained, then cancelled
    stopped_at = models.DateTimeField(null=True, blank=True)
    cpu_percent = models.FloatField(null=True, blank=True)  # the agent's latest sample of its process tree

    tenant_path = "revision__service__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["revision", "index"]
        indexes = [models.Index(fields=["status"], name="serving_replica_status_idx")]

    def __str__(self) -> str:
        return f"{self.revision} #{self.index}"

    @property
    def project(self):
        return self.revision.service.project


class RevisionTraffic(models.Model):
    """What one web process's router sent to a revision in one minute: requests, errors (5xx or the replica
    unreachable), client errors (4xx), mirrored copies among them, and the latency histogram (counts per
    bucket of apps.serving.stats.BOUNDS_MS, the last one open-ended). The process rewrites its row while the
    minute lasts; rows of several processes add up (apps.serving.stats.series)."""

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="traffic")
    minute = models.DateTimeField()  # the start of the minute
    source = models.CharField(max_length=100)  # "host:pid" of the web process that counted
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    client_errors = models.PositiveIntegerField(default=0)
    mirrored = models.PositiveIntegerField(default=0)
    latency_sum_ms = models.FloatField(default=0)
    latency_buckets = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["revision", "minute", "source"], name="serving_traffic_unique_minute")
        ]

    def __str__(self) -> str:
        return f"{self.revision_id} @ {self.minute:%Y-%m-%d %H:%M} ({self.source})"


class ConcurrencySample(models.Model):
    """Requests in flight to a revision in one web process, integrated over the few seconds before `at`
    (request-seconds); summed over a window and divided by it, that is the average concurrency the
    autoscaler reads (apps.serving.stats.concurrency). Kept for minutes only."""

    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=100)
    at = models.DateTimeField()
    busy_seconds = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["revision", "at"], name="serving_sample_rev_at_idx")]

    def __str__(self) -> str:
        return f"{self.revision_id} @ {self.at:%H:%M:%S}: {self.busy_seconds:.3f}"


class PayloadLog(models.Model):
    """One sampled inference request and its answer, as the router saw them (apps/serving/payloads.py): bodies up
    to the service's size cap (else only their size), headers without credentials, and `request_id`, the
    `X-Portal-Request-Id` the caller got back, by which a ground-truth `label` arrives later."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="payload_logs")
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="payload_logs")
    request_id = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    path = models.CharField(max_length=500)
    headers = models.JSONField(default=dict, blank=True)
    request = models.TextField(blank=True)  # "" when over the cap (request_bytes says how large it was)
    request_bytes = models.PositiveIntegerField(default=0)
    status = models.PositiveSmallIntegerField(default=0)
    response = models.TextField(blank=True)
    response_bytes = models.PositiveIntegerField(default=0)
    label = models.JSONField(null=True, blank=True)  # the ground truth, when it arrived
    labelled_at = models.DateTimeField(null=True, blank=True)

    tenant_path = "service__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["revision", "created_at"], name="serving_payload_rev_at_idx")]

    def __str__(self) -> str:
        return self.request_id
