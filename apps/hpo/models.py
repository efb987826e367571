"""A study (what to optimise, over which space, how, with what budget) and its trials (one pipeline run each)."""

from __future__ import annotations

import math

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.querysets import TenantQuerySet


class Algorithm(models.TextChoices):
    RANDOM = "random", _("Random search")
    GRID = "grid", _("Grid search")
    TPE = "tpe", _("Tree-structured Parzen estimator (TPE)")
    CMAES = "cmaes", _("CMA-ES")
    SOBOL = "sobol", _("Quasi-random (Sobol)")
    GP = "gp", _("Gaussian process (Bayesian optimisation)")
    NSGA2 = "nsga2", _("NSGA-II (multi-objective)")


class EarlyStopping(models.TextChoices):
    NONE = "none", _("None")
    MEDIAN = "median", _("Median stopping")
    PERCENTILE = "percentile", _("Percentile")
    SUCCESSIVE_HALVING = "successive_halving", _("Successive halving")
    HYPERBAND = "hyperband", _("Hyperband")


class Study(models.Model):
    """A hyperparameter search in a project: objective metric(s), search space, algorithm, early stopping, budget and
    the trial template (a pipeline spec whose arguments refer to `${trial.<param>}`). Optuna keeps the sampler's view
    of it under `optuna_name` in its own storage (apps/hpo/storage.py); this row is the portal's."""

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        COMPLETED = "completed", _("Completed")
        STOPPED = "stopped", _("Stopped")
        FAILED = "failed", _("Failed")

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="studies")
    name = models.CharField(_("name"), max_length=80, validators=[slug_validator])
    description = models.TextField(_("description"), blank=True)
    # [{"metric": "val_accuracy", "direction": "maximize"}, ...]: several make a multi-objective study. Optional per
    # objective: "strategy" (latest | min | max: which of the trial's values is its result, default latest) and, on a
    # single objective, "goal" (the study completes once a trial reaches it, as Katib's objective goal).
    objectives = models.JSONField(_("objectives"), default=list)
    # {"C": {"type": "float", "low": 0.01, "high": 100, "log": true}, ...} (apps/hpo/space.py).
    space = models.JSONField(_("search space"), default=dict)
    algorithm = models.CharField(_("algorithm"), max_length=20, choices=Algorithm.choices, default=Algorithm.TPE)
    early_stopping = models.CharField(
        _("early stopping"), max_length=20, choices=EarlyStopping.choices, default=EarlyStopping.NONE
    )
    early_stopping_settings = models.JSONField(_("early stopping settings"), default=dict, blank=True)
    max_trials = models.PositiveIntegerField(_("max trials"), default=10)
    parallel_trials = models.PositiveIntegerField(_("parallel trials"), default=1)
    max_failed_trials = models.PositiveIntegerField(_("max failed trials"), default=3)
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    seed = models.BigIntegerField(_("seed"), default=0)
    # The trial template: a pipeline spec with `${trial.<param>}` references, and the pipeline it came from.
    template = models.JSONField(_("trial template"), default=dict)
    pipeline = models.ForeignKey(
        "jobs.Pipeline", on_delete=models.SET_NULL, null=True, blank=True, related_name="studies"
    )
    # Where the trials' metrics come from: {"kind": "tracking"} (the portal's MLflow API, the default) or
    # {"kind": "stdout", "formats": [regex, ...]} (`name=value` lines the task prints, Katib's StdOut collector).
    collector = models.JSONField(_("metrics collector"), default=dict, blank=True)
    optuna_name = models.CharField(max_length=100, unique=True)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.RUNNING)
    reason = models.TextField(_("reason"), blank=True)
    # Parameter importance (Optuna's PED-ANOVA) as of the last finished trial: {"C": 0.8, ...}.
    importance = models.JSONField(default=dict, blank=True)
    # A driver pass holds the study until then (a conditional UPDATE claims it): two passes never run at once.
    lease_until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = _("studies")
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="hpo_study_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_finished(self) -> bool:
        return self.status != self.Status.RUNNING

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def metric_names(self) -> list[str]:
        return [o["metric"] for o in self.objectives]

    @property
    def collector_kind(self) -> str:
        return (self.collector or {}).get("kind") or "tracking"

    @property
    def goal(self) -> float | None:
        return self.objectives[0].get("goal") if len(self.objectives) == 1 else None

    def best_trials(self) -> list[Trial]:
        """The best complete trial (single objective), or the Pareto front (several)."""
        done = [t for t in self.trials.filter(status=Trial.Status.COMPLETE) if len(t.values) == len(self.objectives)]
        signs = [1 if o["direction"] == "minimize" else -1 for o in self.objectives]
        if not self.is_multi_objective:
            return sorted(done, key=lambda t: (signs[0] * t.values[0], t.number))[:1]

        def dominates(a: Trial, b: Trial) -> bool:
            pa = [s * v for s, v in zip(signs, a.values, strict=True)]
            pb = [s * v for s, v in zip(signs, b.values, strict=True)]
            return all(x <= y for x, y in zip(pa, pb, strict=True)) and pa != pb

        return [t for t in done if not any(dominates(o, t) for o in done)]


class Trial(models.Model):
    """One point of the search: the parameters Optuna sampled and the pipeline run that evaluated them."""

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        COMPLETE = "complete", _("Complete")
        PRUNED = "pruned", _("Pruned")
        FAILED = "failed", _("Failed")

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()  # Optuna's trial number in the study (0, 1, ...)
    optuna_trial_id = models.BigIntegerField()
    params = models.JSONField(default=dict)
    run = models.ForeignKey(
        "jobs.PipelineRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="hpo_trials"
    )
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.RUNNING)
    reason = models.TextField(_("reason"), blank=True)
    values = models.JSONField(default=list, blank=True)  # the objective values, in the study's order
    # The first objective's intermediate values reported to the pruner: {"step": value}.
    intermediate = models.JSONField(default=dict, blank=True)
    last_step = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()
    tenant_path = "study__project"

    class Meta:
        ordering = ["study", "number"]
        constraints = [models.UniqueConstraint(fields=["study", "number"], name="hpo_trial_unique")]

    def __str__(self) -> str:
        return f"{self.study} #{self.number}"

    @property
    def project(self):
        return self.study.project

    @property
    def value(self) -> float | None:
        return self.values[0] if self.values else None

    @property
    def is_finished(self) -> bool:
        return self.status != self.Status.RUNNING

    def curve(self) -> list[tuple[int, float]]:
        return sorted(
            (int(k), v) for k, v in self.intermediate.items() if isinstance(v, int | float) and math.isfinite(v)
        )
