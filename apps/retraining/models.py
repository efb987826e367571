"""Continuous training: retrain policies, the data monitors that trigger them, the retrainings they start and the
champion/challenger decisions those end in (docs/retraining.md)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.querysets import TenantQuerySet


class RetrainPolicy(models.Model):
    """How to retrain a model: which pipeline, `full` or `incremental`, with which node arguments (the new dataset
    version goes into `dataset_argument`, e.g. `load.dataset`), and the gate its registered version must pass: its
    `metric` compared with the version at `alias` (the champion), promoted only when better by `margin`, and only
    after a project admin's approval when `require_approval`. Started as `created_by` (the policy's owner), whose
    permission to start runs is checked each time. Its pipeline, dataset and registered model cannot be deleted while
    it names them (RESTRICT: the delete is refused naming the policy; deleting the project deletes them all)."""

    class Mode(models.TextChoices):
        FULL = "full", _("Full")
        INCREMENTAL = "incremental", _("Incremental")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="retrain_policies")
    name = models.SlugField(_("name"), max_length=100)
    pipeline = models.ForeignKey(
        "jobs.Pipeline", on_delete=models.RESTRICT, related_name="retrain_policies", verbose_name=_("pipeline")
    )
    mode = models.CharField(_("mode"), max_length=12, choices=Mode.choices, default=Mode.FULL)
    arguments = models.JSONField(
        _("arguments"), default=dict, blank=True,
        help_text=_('Node arguments that replace the pipeline\'s: {"node": {"argument": value}}. "{version}" is the '
                    'new dataset version, "{previous}" the one before it, "{champion}" the champion\'s model URI '
                    '(its alias), "{champion_version}" the champion version of the start (models:/name/N), '
                    '"{reason}" why it started (data, interval, drift or manual).'),
    )  # fmt: skip
    dataset = models.ForeignKey(
        "datasets.Dataset", on_delete=models.RESTRICT, related_name="retrain_policies", verbose_name=_("dataset"),
        help_text=_("Its newest version is passed in when a drift monitor or a person starts the policy."),
    )  # fmt: skip
    dataset_argument = models.CharField(
        _("dataset argument"), max_length=200, blank=True,
        help_text=_("node.argument that receives the new dataset version (name@number), e.g. load.dataset."),
    )  # fmt: skip
    registered_model = models.ForeignKey(
        "models.RegisteredModel", on_delete=models.RESTRICT, related_name="retrain_policies",
        verbose_name=_("registered model"),
    )  # fmt: skip
    alias = models.CharField(_("champion alias"), max_length=100, default="production")
    metric = models.CharField(_("metric"), max_length=250, default="test_accuracy")
    higher_is_better = models.BooleanField(_("higher is better"), default=True)
    margin = models.FloatField(
        _("margin"), default=0.0, validators=[MinValueValidator(0.0)],
        help_text=_("The challenger must beat the champion's metric by more than this."),
    )  # fmt: skip
    require_approval = models.BooleanField(_("require approval"), default=False)
    drift_monitor = models.ForeignKey(
        "monitoring.DriftMonitor", on_delete=models.SET_NULL, null=True, blank=True, related_name="retrain_policies",
        verbose_name=_("drift monitor"), help_text=_("Its drifted reports start this policy too."),
    )  # fmt: skip
    cooldown_minutes = models.PositiveIntegerField(
        _("cooldown (minutes)"), default=60, validators=[MaxValueValidator(7 * 24 * 60)],
        help_text=_("Triggers within this time of the last retraining are recorded and skipped."),
    )  # fmt: skip
    enabled = models.BooleanField(_("enabled"), default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("owner"),
    )  # fmt: skip
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        verbose_name_plural = "retrain policies"
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="retraining_policy_name_unique")]

    def __str__(self) -> str:
        return self.name

    def better(self, challenger: float, champion: float) -> bool:
        """Whether the challenger beats the champion by more than the margin, in the metric's direction."""
        gain = challenger - champion if self.higher_is_better else champion - challenger
        return gain > self.margin


class DataMonitor(models.Model):
    """Watches a dataset: a new version whose rows changed by at least `min_changed_percent` against the previous
    version, or one of whose features drifted (PSI of the two versions at least `drift_threshold`, the monitoring
    app's statistics), starts `policy`; so does every `interval_minutes` when set (0: never by time)."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="data_monitors")
    name = models.SlugField(_("name"), max_length=100)
    dataset = models.ForeignKey(
        "datasets.Dataset", on_delete=models.RESTRICT, related_name="data_monitors", verbose_name=_("dataset")
    )
    policy = models.ForeignKey(
        RetrainPolicy, on_delete=models.CASCADE, related_name="data_monitors", verbose_name=_("retrain policy")
    )
    min_changed_percent = models.FloatField(
        _("rows changed (%)"), default=10.0, validators=[MinValueValidator(0.0), MaxValueValidator(100.0)]
    )
    drift_threshold = models.FloatField(
        _("feature drift threshold"), default=0.2, validators=[MinValueValidator(0.001), MaxValueValidator(100)],
        help_text=_("A feature whose PSI between the versions reaches this counts as changed."),
    )  # fmt: skip
    target_column = models.CharField(_("target column"), max_length=200, blank=True)
    interval_minutes = models.PositiveIntegerField(
        _("retrain every (minutes)"), default=0, validators=[MaxValueValidator(365 * 24 * 60)],
        help_text=_("0: only when the data changes."),
    )  # fmt: skip
    enabled = models.BooleanField(_("enabled"), default=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="retraining_monitor_name_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def interval(self) -> timedelta | None:
        return timedelta(minutes=self.interval_minutes) if self.interval_minutes else None


class DataCheck(models.Model):
    """One comparison of a dataset version with the previous one: the share of rows changed, each feature's drift
    scores, and whether it triggered the monitor's policy (and why not, when it did not)."""

    monitor = models.ForeignKey(DataMonitor, on_delete=models.CASCADE, related_name="checks")
    version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.CASCADE, related_name="+")
    previous = models.ForeignKey(
        "datasets.DatasetVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    changed_percent = models.FloatField(null=True, blank=True)
    features = models.JSONField(default=dict, blank=True)
    score = models.FloatField(null=True, blank=True)
    drifted = models.JSONField(default=list, blank=True)  # names of the features at or above the threshold
    triggered = models.BooleanField(default=False)
    message = models.TextField(blank=True)

    tenant_path = "monitor__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["monitor", "version"], name="retraining_check_once")]

    def __str__(self) -> str:
        return f"{self.monitor} @ {self.version_id}"

    @property
    def project(self):
        return self.monitor.project


class Retraining(models.Model):
    """One start of a policy: why (`reason`), with which dataset version, the pipeline run it started (none when it
    was skipped or refused: `message` says why) and how it ended."""

    class Reason(models.TextChoices):
        DATA = "data", _("Dataset changed")
        INTERVAL = "interval", _("Interval elapsed")
        DRIFT = "drift", _("Service inputs drifted")
        MANUAL = "manual", _("Started by hand")

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        SKIPPED = "skipped", _("Skipped")
        FAILED = "failed", _("Failed")
        DECIDED = "decided", _("Decided")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="retrainings")
    policy = models.ForeignKey(RetrainPolicy, on_delete=models.CASCADE, related_name="retrainings")
    reason = models.CharField(max_length=10, choices=Reason.choices)
    detail = models.CharField(max_length=500, blank=True)
    dataset_version = models.ForeignKey(
        "datasets.DatasetVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    run = models.OneToOneField(
        "jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="retraining"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.policy} #{self.pk}"


class PromotionDecision(models.Model):
    """The champion/challenger gate's verdict on a version a retraining registered, with both metrics: `promoted`
    (the alias moved), `rejected` (by the gate or an admin; the alias stays), `pending` (better, waiting for a project
    admin) or `approved` (promoted by an admin). `basis` says where the champion's value comes from: the challenger's
    run scoring it on the same test split, or the champion's own run. A promotion keeps the version the alias left
    (`previous`) so that it can be rolled back in one click."""

    class Outcome(models.TextChoices):
        PROMOTED = "promoted", _("Promoted")
        REJECTED = "rejected", _("Rejected")
        PENDING = "pending", _("Waiting for approval")
        APPROVED = "approved", _("Approved")

    class Basis(models.TextChoices):
        """Where `champion_value` comes from."""

        SAME_SPLIT = "same_split", _("same test split")  # the challenger's evaluate step scored the champion too
        OWN_RUN = "own_run", _("champion's own evaluation")  # the value the champion's run logged on its split

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="promotion_decisions")
    policy = models.ForeignKey(RetrainPolicy, on_delete=models.CASCADE, related_name="decisions")
    retraining = models.ForeignKey(
        Retraining, on_delete=models.SET_NULL, null=True, blank=True, related_name="decisions"
    )
    registered_model = models.ForeignKey("models.RegisteredModel", on_delete=models.CASCADE, related_name="+")
    alias = models.CharField(max_length=100)
    challenger = models.ForeignKey("models.ModelVersion", on_delete=models.CASCADE, related_name="+")
    champion = models.ForeignKey(
        "models.ModelVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    metric = models.CharField(max_length=250)
    challenger_value = models.FloatField(null=True, blank=True)
    champion_value = models.FloatField(null=True, blank=True)
    basis = models.CharField(max_length=10, choices=Basis.choices, blank=True)  # empty: no champion value
    margin = models.FloatField(default=0.0)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    message = models.TextField(blank=True)
    previous = models.ForeignKey(
        "models.ModelVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )  # where the alias pointed before this decision moved it
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    rolled_back_at = models.DateTimeField(null=True, blank=True)
    rolled_back_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "challenger"], name="retraining_one_decision_per_version")
        ]

    def __str__(self) -> str:
        return f"{self.registered_model}@{self.alias}: v{self.challenger.version} {self.outcome}"

    @property
    def moved_alias(self) -> bool:
        return self.outcome in (self.Outcome.PROMOTED, self.Outcome.APPROVED)

    @property
    def can_roll_back(self) -> bool:
        return self.moved_alias and self.rolled_back_at is None and self.previous_id is not None
