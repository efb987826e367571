"""Job templates, pipelines (DAGs), their runs and task attempts, schedules, logs and resource samples."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext

from apps.projects.querysets import TenantQuerySet
from portal.lib.fields import EncryptedText


class SharedTenantQuerySet(TenantQuerySet):
    """Rows of the user's projects plus the built-in rows that belong to no project."""

    def for_user(self, user, perm: str = "view_project", token=None):  # type: ignore[override]
        from apps.projects.permissions import projects_for

        if not getattr(user, "is_authenticated", False):
            return self.none()
        visible = projects_for(user, perm).values("pk")
        if token is not None and token.project_id is not None:
            visible = visible.filter(pk=token.project_id)
        q = models.Q(project_id__in=visible)
        if perm == "view_project":
            q |= models.Q(project__isnull=True)
        return self.filter(q)

    def in_project(self, project):  # type: ignore[override]
        return self.filter(models.Q(project=project) | models.Q(project__isnull=True))


class PipelineRunQuerySet(TenantQuerySet):
    def with_progress(self) -> PipelineRunQuerySet:
        """Annotate `done_count`, the run's progress (`PipelineRun.progress`), as a correlated subquery: counted for
        the rows a page or a sliced list returns, not aggregated over every task of the project."""
        tasks = TaskRun.objects.filter(run=models.OuterRef("pk"))
        done = finished_nodes(tasks).values("run").annotate(n=_node_count())
        return self.annotate(
            done_count=Coalesce(models.Subquery(done.values("n"), output_field=models.IntegerField()), 0)
        )


def finished_nodes(tasks: models.QuerySet[TaskRun]) -> models.QuerySet[TaskRun]:
    """The one definition of a run's progress: its nodes with a finished attempt (a node being retried counts as
    done once one attempt ended; an attempt preempted and requeued did not end the node). Lists annotate it
    (`with_progress`); one run reads it (`PipelineRun.progress`)."""
    return (
        tasks.filter(status__in=TASK_FINISHED)
        .exclude(status=TaskStatus.CANCELLED, preempted_at__isnull=False)
        .order_by()
    )


def _node_count() -> models.Count:
    return models.Count("node", distinct=True)


class Kind(models.TextChoices):
    JOB = "job", _("Job")
    DISTRIBUTED = "distributed", _("Distributed")


class Image(models.Model):
    """A container image a template runs in (recorded locally; pulled on Kubernetes)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    name = models.CharField(_("name"), max_length=200, help_text=_("e.g. python:3.11-slim"))
    description = models.TextField(_("description"), blank=True)
    # Credentials of a private registry: on Kubernetes they become a dockerconfigjson Secret named in the pods'
    # imagePullSecrets. The password is encrypted at rest.
    registry = models.CharField(_("registry"), max_length=200, blank=True, help_text=_("e.g. registry.example.com"))
    registry_username = models.CharField(_("registry username"), max_length=200, blank=True)
    registry_password = EncryptedText(_("registry password"), blank=True, null=True)  # "" is stored as NULL
    created_at = models.DateTimeField(default=timezone.now)

    objects = SharedTenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="jobs_image_unique")]

    def __str__(self) -> str:
        return self.name


# The msgctxt of a built-in template's name, category and description in the catalogues.
TEMPLATE_TEXT_CONTEXT = "job template"


class JobTemplate(models.Model):
    """A reusable step: what to run and the JSON Schema of its arguments. Built-ins have no project.

    A template is versioned: changing what it runs makes a new row with the next `version`, so a frozen
    run always knows exactly what it ran, and caching keys on the version.
    """

    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="job_templates"
    )
    slug = models.SlugField(_("slug"), max_length=100)
    version = models.PositiveIntegerField(_("version"), default=1)
    name = models.CharField(_("name"), max_length=200)
    category = models.CharField(_("category"), max_length=100, default="general")
    description = models.TextField(_("description"), blank=True)
    image = models.CharField(_("image"), max_length=200, default="python:3.11-slim")
    command = models.JSONField(_("command"), default=list, help_text=_("Entrypoint as a list; args follow as --flags."))
    workdir = models.CharField(_("working directory"), max_length=500, blank=True)
    env = models.JSONField(_("environment"), default=dict, blank=True)
    args_schema = models.JSONField(_("argument schema"), default=dict, blank=True)
    resources = models.JSONField(_("default resources"), default=dict, blank=True)
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices, default=Kind.JOB)
    framework = models.CharField(_("framework"), max_length=30, blank=True)
    replicas = models.JSONField(_("replicas per role"), default=dict, blank=True)
    # Distributed templates: the default strategy (ddp, fsdp, deepspeed, horovod; parallelism, precision, …) that a
    # node may override key by key; apps/runtime/strategy.py checks it, docs/distributed.md tells it.
    strategy = models.JSONField(_("distributed strategy"), default=dict, blank=True)
    timeout = models.PositiveIntegerField(_("default timeout (s)"), null=True, blank=True)
    side_effects = models.BooleanField(
        _("has side effects"),
        default=False,
        help_text=_(
            "Its tasks change something besides their outputs (register a model, notify, deploy): a node of it is "
            "never taken from the cache."
        ),
    )
    # Its tasks may be stopped and started again from the beginning (they checkpoint, or are cheap to rerun): the queue
    # may then run them on idle room above their project's quota and preempt them for a project under its quota
    # (PORTAL_QUEUE_BORROWING, docs/scheduling.md). Frozen into a run's nodes when the run starts.
    preemptible = models.BooleanField(
        _("preemptible"),
        default=False,
        help_text=_(
            "Its tasks may be stopped and requeued (rerun from the start) so that another project gets its quota back; "
            "in exchange they may use idle capacity above the project's quota."
        ),
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = SharedTenantQuerySet.as_manager()

    class Meta:
        ordering = ["category", "slug", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["project", "slug", "version"], name="jobs_template_version_unique"),
            models.UniqueConstraint(
                fields=["slug", "version"], condition=models.Q(project__isnull=True), name="jobs_builtin_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.slug}@{self.version}"

    @property
    def ref(self) -> str:
        return f"{self.slug}@{self.version}"

    # What a person sees: a built-in's name, category and description are the fixture's English, translated here
    # at display time (apps/jobs/builtin_text.py lists them for makemessages); a project's own are shown as typed.
    # The stored text and the API stay language-free.
    def _display(self, text: str) -> str:
        if self.project_id is not None or not text:
            return text  # pgettext("") would return the catalogue's header
        return pgettext(TEMPLATE_TEXT_CONTEXT, text)

    @property
    def display_name(self) -> str:
        return self._display(self.name)

    @property
    def display_category(self) -> str:
        return self._display(self.category)

    @property
    def display_description(self) -> str:
        return self._display(self.description)

    @property
    def search_text(self) -> str:
        """What a search box matches, lower-cased: the slug, and the stored English beside what is shown, so that
        "iris" and "加载" both find a built-in whatever the user's language."""
        stored = (self.name, self.category, self.description)
        shown = (self.display_name, self.display_category, self.display_description)
        return " ".join(dict.fromkeys((self.slug, *stored, *shown))).lower()

    def matches(self, query: str) -> bool:
        """Every word of `query` is somewhere in `search_text` (the templates page and the editor's palette)."""
        text = self.search_text
        return all(word in text for word in query.lower().split())


class FailurePolicy(models.TextChoices):
    FAIL_FAST = "fail_fast", _("Stop at the first failure")
    CONTINUE = "continue", _("Run every node that can still run")


class Pipeline(models.Model):
    """A DAG of template invocations. `spec` is the whole definition (the YAML's `spec`), validated on save."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="pipelines")
    name = models.SlugField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    spec = models.JSONField(_("specification"), default=dict)
    layout = models.JSONField(_("editor layout"), default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="jobs_pipeline_unique")]

    def __str__(self) -> str:
        return self.name


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLING = "cancelling", _("Cancelling")
    CANCELLED = "cancelled", _("Cancelled")


RUN_FINISHED = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}


def run_status_labels() -> dict[str, str]:
    """{status: translated label} for the live badges (static/js/dashboards.js)."""
    return {value: str(label) for value, label in RunStatus.choices}


# How a run was started (PipelineRun.trigger, free text written by the starters), in the words of the pages.
RUN_TRIGGERS = {
    "manual": _("Started by hand"),
    "api": _("Started through the API"),
    "rerun": _("Re-run"),
    "schedule": _("Scheduled"),
    "backfill": _("Backfill of a schedule"),
    "demo": _("Demo"),
    "study": _("Trial of a hyperparameter study"),
    "retrain": _("Continuous training"),
}


class PipelineRun(models.Model):
    """One execution of a pipeline. `spec` is frozen at start: templates resolved to versions, args final."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="pipeline_runs")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    pipeline_name = models.CharField(max_length=100)
    number = models.PositiveIntegerField()
    spec = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    reason = models.TextField(blank=True)
    trigger = models.CharField(max_length=20, default="manual")
    schedule = models.ForeignKey("Schedule", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    logical_date = models.DateTimeField(null=True, blank=True)
    rerun_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reruns")
    priority = models.IntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The `Idempotency-Key` of the API request that started the run (unique per user) and a digest of that request:
    # a retry with the same key gets this run back instead of a second one.
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    request_digest = models.CharField(max_length=64, blank=True, default="")

    objects = PipelineRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["project", "number"], name="jobs_run_number_unique"),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=~models.Q(idempotency_key=""),
                name="jobs_run_idempotency_key_unique",
            ),
        ]
        indexes = [models.Index(fields=["project", "status"])]

    def __str__(self) -> str:
        return f"{self.pipeline_name} #{self.number}"

    def progress(self) -> tuple[int, int]:
        """(nodes done, nodes in all): `done_count` when the query annotated it (`with_progress`), else counted."""
        done = getattr(self, "done_count", None)
        if done is None:
            done = finished_nodes(self.tasks.all()).aggregate(n=_node_count())["n"]
        return done, len(self.spec.get("nodes", []))

    @property
    def is_finished(self) -> bool:
        return self.status in RUN_FINISHED

    @property
    def duration(self) -> float | None:
        """Seconds from the start to the end, or to now while it runs (None before it starts)."""
        if self.started_at is None:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    @property
    def trigger_label(self) -> str:
        return str(RUN_TRIGGERS.get(self.trigger, self.trigger))


class TaskStatus(models.TextChoices):
    WAITING = "waiting", _("Waiting")  # ready, held back by quota/capacity/parallelism/backoff
    QUEUED = "queued", _("Queued")  # handed to the runtime
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    CACHED = "cached", _("Cached")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    SKIPPED = "skipped", _("Skipped")
    UPSTREAM_FAILED = "upstream_failed", _("Upstream failed")


TASK_ACTIVE = {TaskStatus.QUEUED, TaskStatus.RUNNING}
TASK_DONE_OK = {TaskStatus.SUCCEEDED, TaskStatus.CACHED, TaskStatus.SKIPPED}
TASK_FINISHED = TASK_DONE_OK | {TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.UPSTREAM_FAILED}


class TaskRun(models.Model):
    """One attempt of one node of a run (a retry is a new row with the next `attempt`)."""

    run = models.ForeignKey(PipelineRun, on_delete=models.CASCADE, related_name="tasks")
    node = models.CharField(max_length=100)
    attempt = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=20, choices=TaskStatus.choices, default=TaskStatus.WAITING, db_index=True)
    reason = models.TextField(blank=True)
    waiting_reason = models.CharField(max_length=300, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    cache_key = models.CharField(max_length=64, blank=True, db_index=True)
    cached_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    output_dir = models.CharField(max_length=500, blank=True)
    output_digest = models.CharField(max_length=64, blank=True)
    resources = models.JSONField(default=dict, blank=True)  # per replica
    # How many replicas hold `resources` (a distributed template's, apps/runtime/workload.py: total_replicas): what
    # the queue counts against quotas and capacity is their product (`demand`).
    replicas = models.PositiveIntegerField(default=1)
    usage = models.JSONField(default=dict, blank=True)
    # What its samples showed of how it used what it held (apps/jobs/usage_warnings.py): [{kind, replica, reason, at}]
    resource_warnings = models.JSONField(default=list, blank=True)
    # Why a failed attempt failed (apps/jobs/diagnosis.py): the cause of the first rule that matched, and what it saw.
    failure_cause = models.CharField(max_length=30, blank=True, default="")
    failure_detail = models.TextField(blank=True, default="")
    runtime = models.CharField(max_length=20, default="local")
    handle = models.CharField(max_length=200, blank=True)
    image_digest = models.CharField(
        max_length=500,
        blank=True,
        help_text=_(
            "The image the attempt really ran, as the runtime resolved it (Kubernetes: the container's imageID, "
            "e.g. docker.io/library/python@sha256:…); empty on the local runtime, which runs no image."
        ),
    )
    api_token = models.ForeignKey(
        "accounts.ApiToken",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The short-lived token injected as PORTAL_API_TOKEN; revoked when the attempt ends."),
    )
    created_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When its timeout runs out, counted from its hand-over to the runtime: the queue's estimate of its end, from
    # which it reserves room for the task at the head (apps/jobs/queue_policy.py). None: no timeout.
    ends_by = models.DateTimeField(null=True, blank=True)
    # Started on idle room above its project's quota (PORTAL_QUEUE_BORROWING): it does not count against the quota and
    # may be preempted for a project under its quota. `preempted_at`: the queue asked the runtime to stop it; when
    # the runtime reports it cancelled, the orchestrator records it so and requeues its node as a new attempt.
    borrowed = models.BooleanField(default=False)
    preempted_at = models.DateTimeField(null=True, blank=True)
    # Its node's declared timeout in seconds, copied from the run's frozen spec when the row is made (None: the node
    # declares none and its template's counts): the backfill queue groups the waiting tasks it has not read by it
    # (apps/jobs/queue_scan.py), as whether one may start beside a reservation depends on how long it runs.
    timeout = models.PositiveIntegerField(null=True, blank=True)

    tenant_path = "run__project"

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "created_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["run", "node", "attempt"], name="jobs_taskrun_attempt_unique")]
        # A run's waiting tasks, looked up run by run (the queue's groups, docs/scheduling.md): without it, a plan made
        # from estimates of rows just inserted ANDed the run's few rows with every waiting task's, once per run.
        indexes = [models.Index(fields=["run"], condition=models.Q(status="waiting"), name="jobs_taskrun_waiting_run")]

    def __str__(self) -> str:
        return f"{self.run} / {self.node} (attempt {self.attempt})"

    @property
    def project(self):
        return self.run.project

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    @property
    def diagnosis(self) -> dict[str, str] | None:
        """Its failure's cause, detail and next step in the active language (None: no diagnosis)."""
        from apps.jobs.diagnosis import describe

        return describe(self.failure_cause, self.failure_detail) if self.failure_cause else None


class ILike(models.Lookup):
    """`text__ilike=pattern`: ILIKE, as `lower(text) LIKE lower(pattern)` (PostgreSQL; the caller escapes and places
    the wildcards): the comparison whose `lower()` the chunks of LogChunk are indexed by, where `icontains` compares
    UPPER(text)."""

    lookup_name = "ilike"

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        # What PostgreSQL's ILIKE does in a multi-byte encoding, written out: lower() of both sides, then LIKE. Spelled
        # so, the pattern is lowered once per query, where ILIKE lowers it again for every line (25 % of a scan).
        return f"lower({lhs}) LIKE lower({rhs})", [*lhs_params, *rhs_params]


class LogLine(models.Model):
    """One line of output of one replica of one attempt. Append-only.

    `seq` numbers a task attempt's lines from 1 without gaps; the primary key orders a whole run's lines
    as they were stored (the websocket resumes from it)."""

    # No foreign-key constraints or single-column indexes: checking both keys of every line at commit cost
    # more than storing it, and (run, id) / (task, seq) already serve every lookup. Lines go away with their
    # run or task through Django's cascade, and only the log writer adds them, for tasks it was given.
    run = models.ForeignKey(
        PipelineRun, on_delete=models.CASCADE, related_name="log_lines", db_constraint=False, db_index=False
    )
    task = models.ForeignKey(
        TaskRun, on_delete=models.CASCADE, related_name="log_lines", db_constraint=False, db_index=False
    )
    node = models.CharField(max_length=100)
    attempt = models.PositiveSmallIntegerField()
    replica = models.CharField(max_length=50, default="0")
    seq = models.BigIntegerField()
    ts = models.DateTimeField()
    stream = models.CharField(max_length=6, default="stdout")
    text = models.TextField()

    tenant_path = "run__project"

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["run_id", "pk"]
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="jobs_logline_seq_unique")]
        indexes = [models.Index(fields=["run", "id"])]

    def __str__(self) -> str:
        return self.text[:80]


LogLine._meta.get_field("text").register_lookup(ILike)


class LogChunk(models.Model):
    """The text of consecutive stored lines of one task attempt, lower-cased: what the text index covers
    (apps/jobs/logindex.py; PostgreSQL: a trigram GIN index, jobs.0006; SQLite: an FTS5 trigram table, jobs.0017).
    Written after the lines are live, by the agent's indexer. A line is in at most one chunk, and an attempt's chunks
    cover its lines from the first on, without holes: the lines after the last chunk are its tail, which search reads
    too.
    """

    # The run for the trigram index, which holds it beside the text; chunks go away with their task.
    run_id = models.BigIntegerField()
    task = models.ForeignKey(
        TaskRun, on_delete=models.CASCADE, related_name="log_chunks", db_constraint=False, db_index=False
    )
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    # The ids of its lines lie in first_id..last_id (with other tasks' lines between them).
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["task_id", "first_seq"]
        indexes = [models.Index(fields=["task", "last_seq"])]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.first_seq}–{self.last_seq}"


class ResourceSample(models.Model):
    """CPU, memory and GPU (utilisation of the GPUs it is on, memory its processes hold; null without GPUs) of one
    replica's process tree of a task attempt, sampled by the runtime about once a second."""

    task = models.ForeignKey(TaskRun, on_delete=models.CASCADE, related_name="samples")
    replica = models.CharField(max_length=64, blank=True, default="")  # "0", or "master-0", "worker-1", …
    ts = models.DateTimeField()
    cpu_percent = models.FloatField()
    rss_bytes = models.BigIntegerField()
    gpu_percent = models.FloatField(null=True, blank=True)
    gpu_memory_bytes = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["task_id", "ts"]
        indexes = [models.Index(fields=["task", "ts"])]

    def __str__(self) -> str:
        return f"{self.task_id} @ {self.ts}"


class Schedule(models.Model):
    """Runs a pipeline on a cron schedule (evaluated by Celery beat)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="schedules")
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(_("cron expression"), max_length=100)
    start_date = models.DateTimeField(_("start date"), default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    timezone = models.CharField(_("time zone"), max_length=64, default="UTC")  # shadows the module below
    catchup = models.BooleanField(_("catch up missed runs"), default=False)
    max_active_runs = models.PositiveSmallIntegerField(_("max active runs"), default=1)
    depends_on_past = models.BooleanField(_("depends on past"), default=False)
    enabled = models.BooleanField(_("enabled"), default=True)
    last_logical_date = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["pipeline__name", "pk"]

    def __str__(self) -> str:
        return f"{self.pipeline} {self.cron}"


# The roll-ups of the overview's 30-day charts (apps/console/dashboards.py, apps/jobs/rollups.py). Database triggers
# (migration jobs.0015) append every change of runs and ended tasks to the delta tables, so every path that writes runs
# or tasks keeps them true without a statement of its own: the services, the queryset `update()`s and `bulk_update`s,
# `bulk_create`, deletes, raw SQL. The triggers only INSERT (no unique key, no upsert), so no writer ever waits on
# another for a roll-up row; the compaction (`rollups.compact`, beat's `compact-slot-rollups`) folds the deltas into
# the summary tables. A reader sums both in one statement. No admin: nobody edits them by hand.
# A slot is a quarter of an hour in UTC: every time zone in use today is a whole number of quarter hours off UTC, so
# the local days of whatever zone is active are unions of slots, and the page's days stay exact in any of them.
SLOT_SECONDS = 15 * 60


class RunSlot(models.Model):
    """How many of a project's runs were created in one slot and are now in one status."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    slot = models.DateTimeField()  # the slot's first instant
    status = models.CharField(max_length=20, choices=RunStatus.choices)
    runs = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "slot", "status"], name="jobs_runslot_unique")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.slot:%Y-%m-%d %H:%M} {self.status}: {self.runs}"


class TaskUsageSlot(models.Model):
    """The task attempts of a project that ended in one slot with one failure cause (empty: not failed): how many,
    the CPU-seconds they used (`usage.cpu_seconds`) and the GPU-seconds they held (`resources.gpu` ×
    `usage.wall_seconds`), a missing or non-numeric value counting nothing."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    slot = models.DateTimeField()
    failure_cause = models.CharField(max_length=30, blank=True, default="")
    tasks = models.IntegerField(default=0)
    cpu_seconds = models.FloatField(default=0)
    gpu_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "slot", "failure_cause"], name="jobs_taskusageslot_unique")
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.slot:%Y-%m-%d %H:%M} {self.failure_cause or '-'}: {self.tasks}"


# The deltas: written by the triggers only, read with the summaries, deleted by the compaction. No foreign key
# constraint: a project's cascade deletes its runs after the collector has passed this table, and their triggers
# append the runs' removal; the compaction drops the rows of projects that are gone.
class RunSlotDelta(models.Model):
    """A change of `RunSlot` not yet compacted: `runs` (positive or negative) under one key."""

    project = models.ForeignKey(
        "projects.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    slot = models.DateTimeField()
    status = models.CharField(max_length=20, choices=RunStatus.choices)
    runs = models.IntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["project", "slot"], name="jobs_runslotdelta_project")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.slot:%Y-%m-%d %H:%M} {self.status}: {self.runs:+d}"


class TaskUsageSlotDelta(models.Model):
    """A change of `TaskUsageSlot` not yet compacted."""

    project = models.ForeignKey(
        "projects.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    slot = models.DateTimeField()
    failure_cause = models.CharField(max_length=30, blank=True, default="")
    tasks = models.IntegerField(default=0)
    cpu_seconds = models.FloatField(default=0)
    gpu_seconds = models.FloatField(default=0)

    class Meta:
        indexes = [models.Index(fields=["project", "slot"], name="jobs_usagedelta_project")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.slot:%Y-%m-%d %H:%M} {self.failure_cause or '-'}: {self.tasks:+d}"
