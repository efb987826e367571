"""The study driver: one pass follows the running trials (intermediate values to the pruner, final values to the
sampler), fails dead ones, stops on budget or deadline and asks for new trials while slots are free.

A pass claims its study with a conditional UPDATE of `lease_until`, so two passes (the beat's and one kicked by a
finished run, or two workers) never drive one study at once, and a pass that died frees the study when the lease
runs out. Everything a pass does is level-triggered: it compares the portal's rows with Optuna's storage and the
runs' state and repairs, so running it again, or after any process restarted, is safe.

Commits (docs/hpo.md, "What a pass commits"): the trials that ended in a pass are saved in one transaction, the new
trials in another; the lease's claim and release, and Optuna's storage, commit without waiting for the WAL flush
(`synchronous_commit = off`), because a PostgreSQL crash that loses one of them loses every later commit too and what
is left is repaired by the next pass.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.hpo import collect, storage
from apps.hpo import space as search_space
from apps.hpo.models import Algorithm, EarlyStopping, Study, Trial
from apps.jobs.models import RunStatus
from apps.jobs.services import RunBatch, cancel_run
from apps.projects.events import publish_event
from apps.projects.permissions import CONTRIBUTE, has_project_perm
from portal.lib.asynccommit import update_unflushed

logger = logging.getLogger(__name__)
LEASE = timedelta(minutes=5)


def advance_study(study_id: int) -> Study | None:
    """One pass over the study, or None when another pass holds it or it is finished."""
    now = timezone.now()
    running = Study.objects.filter(pk=study_id, status=Study.Status.RUNNING)
    recovered = False
    # The lease commits without waiting for the WAL flush (portal.lib.asynccommit): a claim lost in a crash of
    # PostgreSQL takes every later write of its pass with it, and a lost release leaves a lease that runs out and is
    # taken over by a recovering pass.
    if not update_unflushed(running.filter(lease_until__isnull=True), lease_until=now + LEASE):
        # Held: by a live pass (leave it), or by one that died (its lease ran out): take over and repair.
        if not update_unflushed(running.filter(lease_until__lt=now), lease_until=now + LEASE):
            return None
        recovered = True
    try:
        # The project's quota with it: a pass that starts trials checks their runs against it (`RunBatch`).
        study = Study.objects.select_related("project__quota", "created_by").get(pk=study_id)
        changed = _pass(study, recovered)
    finally:
        update_unflushed(Study.objects.filter(pk=study_id), lease_until=None)
    study.lease_until = None  # the pass wrote every other change on this object itself
    if changed:
        _publish(study)
    return study


def _publish(study: Study) -> None:
    """Tell the project's open pages (after the commit: a page that re-fetches must see the change)."""
    project_id, pk, status = study.project_id, study.pk, study.status
    transaction.on_commit(lambda: publish_event(project_id, "study", pk, status=status))


def _pass(study: Study, recovered: bool = False) -> bool:
    """One pass; `recovered`: the previous pass died holding the study (only then can Optuna hold trials that have
    no portal row: every other way out of `_start_trials` tells its trials FAIL)."""
    counts = dict.fromkeys(Trial.Status.values, 0)
    counts.update(study.trials.values_list("status").annotate(n=Count("pk")).order_by())
    ostudy = storage.load(study, sum(counts.values()))
    changed = _fail_orphans(study, ostudy) if recovered else False
    finished = 0
    if counts[Trial.Status.RUNNING]:
        # One commit for every trial that moved in this pass, their tracking runs' tags and the importance. Optuna
        # was told before (its own commits): a pass that fails in here rolls the rows back, and the next pass finds
        # the same ended runs and tells again, which Optuna skips for a trial it already has as finished.
        with transaction.atomic():
            untagged: list[Trial] = []
            for trial in study.trials.filter(status=Trial.Status.RUNNING).select_related("run"):
                moved = _follow(study, ostudy, trial, untagged)
                changed |= moved
                if moved and trial.is_finished:
                    counts[Trial.Status.RUNNING] -= 1
                    counts[trial.status] += 1
                    finished += 1
            if untagged:
                _tag_tracking_runs(study, untagged)
            if finished:
                _update_importance(study, ostudy, counts[Trial.Status.COMPLETE], finished)
    reached = _goal_reached(study)
    if reached is not None:
        reason = _("The goal (%(goal)s) was reached by trial #%(number)s.") % {"goal": study.goal, "number": reached}
        _finish(study, ostudy, Study.Status.COMPLETED, reason)
        return True
    if study.deadline is not None and timezone.now() >= study.deadline:
        _finish(study, ostudy, Study.Status.STOPPED, _("The deadline was reached."))
        return True
    if counts[Trial.Status.FAILED] > study.max_failed_trials:
        reason = _("%(n)s trials failed (at most %(max)s may).") % {
            "n": counts[Trial.Status.FAILED], "max": study.max_failed_trials,
        }  # fmt: skip
        _finish(study, ostudy, Study.Status.FAILED, reason)
        return True
    total, active = sum(counts.values()), counts[Trial.Status.RUNNING]
    limit = study.max_trials
    if study.algorithm == Algorithm.GRID:
        limit = min(limit, search_space.grid_size(search_space.grid(study.space) or {}))
    if active < study.parallel_trials and total < limit and not _may_start_runs(study):
        _finish(study, ostudy, Study.Status.FAILED, _("The study's owner may no longer start runs here."))
        return True
    if active < study.parallel_trials and total < limit:
        try:
            started = _start_trials(study, ostudy, min(study.parallel_trials - active, limit - total), total)
        except PermissionDenied:  # e.g. the project's runtime refuses the owner now
            _finish(study, ostudy, Study.Status.FAILED, _("The study's owner may no longer start runs here."))
            return True
        active, total, changed = active + started, total + started, True
    if total >= limit and active == 0:
        _update_importance(study, ostudy, counts[Trial.Status.COMPLETE], final=True)
        study.status, study.finished_at = Study.Status.COMPLETED, timezone.now()
        study.reason = _("All %(n)s trials ran.") % {"n": total}
        study.save(update_fields=["status", "finished_at", "reason"])
        changed = True
    return changed


def _goal_reached(study: Study) -> int | None:
    """The number of the first complete trial that reached the study's goal (Katib's objective goal), if any."""
    goal = study.goal
    if goal is None:
        return None
    done = study.trials.filter(status=Trial.Status.COMPLETE).order_by("number").values_list("number", "values")
    maximize = study.objectives[0]["direction"] == "maximize"
    for number, values in done:
        if values and (values[0] >= goal if maximize else values[0] <= goal):
            return number
    return None


def _may_start_runs(study: Study) -> bool:
    """Whether the study's owner may still start runs in its project: checked once per pass that starts trials
    (its trials' runs are then started without checking it again)."""
    return study.created_by is None or has_project_perm(study.created_by, study.project, CONTRIBUTE)


def _ask(ostudy: Any) -> Any:
    """A new Optuna trial: `Study.ask()` less its look for WAITING (enqueued) trials, which the portal never makes
    and which re-reads every unfinished trial of the study from the storage (each running trial's params, values and
    attributes: several statements per trial running in parallel, for every trial asked)."""
    import optuna

    ostudy._thread_local.cached_all_trials = None
    return optuna.trial.Trial(ostudy, ostudy._storage.create_new_trial(ostudy._study_id))


def _fail_orphans(study: Study, ostudy: Any) -> bool:
    """Optuna trials left RUNNING by a pass that died between `ask` and making the trial's row: told failed."""
    from optuna.trial import TrialState

    known = set(study.trials.values_list("number", flat=True))
    orphans = [
        t.number for t in ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number not in known
    ]
    for number in orphans:
        _tell(ostudy, number, state=TrialState.FAIL)
    return bool(orphans)


def _tell(ostudy: Any, trial: Any, values: list[float] | None = None, state: Any = None) -> None:
    """`Study.tell(trial, values, state, skip_if_finished=True)` less the copy of the finished trial it reads back
    from the storage to return (the trial and its params, values, attributes and intermediate values: six statements
    the driver never uses). `trial`: an `optuna.trial.Trial` where the pass holds one (no look-up of its id), else
    its number."""
    from optuna.study._tell import _tell_with_warning

    if values is not None and len(values) == 1:
        values = values[0]
    _tell_with_warning(ostudy, trial, values, state, skip_if_finished=True)


def _start_trials(study: Study, ostudy: Any, n: int, total: int) -> int:
    """Ask for `n` trials and start their runs, all in one transaction of the portal's (one commit for the pass's
    runs, their queued advances and trial rows): the runs as one `RunBatch` (the project's limits and templates read
    once, the runs numbered, inserted and queued in one statement each), the rows in one insert. Any failure other
    than an invalid run tells every trial asked here FAIL (none of their rows survive the rollback) and raises."""
    asked: list[Any] = []
    try:
        with transaction.atomic():
            batch = RunBatch(study.project, study.created_by, trigger="study", permission_checked=True)  # this pass
            trials = []
            for i in range(n):
                ostudy.sampler = storage.make_sampler(study, total + i)
                trials.append(_add_trial(study, ostudy, batch, asked))
            runs = iter(batch.start())
            for trial in trials:
                if trial.status == Trial.Status.RUNNING:
                    trial.run = next(runs)
            Trial.objects.bulk_create(trials)
    except BaseException:
        from optuna.trial import TrialState

        for otrial in asked:
            _tell(ostudy, otrial, state=TrialState.FAIL)
        raise
    return n


def _add_trial(study: Study, ostudy: Any, batch: RunBatch, asked: list[Any]) -> Trial:
    """Ask for one trial and add its run to the pass's batch (`asked` gets it): its row, not saved yet. Values that
    make an invalid run (e.g. beyond an argument's own limits or the project's quota) fail the trial at once, with
    no run."""
    from optuna.trial import TrialState

    otrial = _ask(ostudy)
    asked.append(otrial)
    params = search_space.sample(otrial, study.space)
    spec = uncached(study.template, search_space.fill(study.template, params, otrial.number))
    spec["env"] = {
        "MLFLOW_EXPERIMENT_NAME": study.name,
        **(spec.get("env") or {}),
        "HPO_STUDY": study.name,
        "HPO_TRIAL": str(otrial.number),
    }
    trial = Trial(study=study, number=otrial.number, optuna_trial_id=otrial._trial_id, params=params)
    try:
        batch.add(spec, name=f"{study.name}-trial-{otrial.number}")
    except ValidationError as exc:
        _tell(ostudy, otrial, state=TrialState.FAIL)
        trial.status, trial.finished_at = Trial.Status.FAILED, timezone.now()
        trial.reason = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return trial


def uncached(template: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The nodes that use the trial's values run every time: two trials that sample the same point (a random
    sampler and TPE's random start with one seed do) must each log their own metrics, which a cache hit would not.
    Nodes that do not depend on the values (loading and splitting the data) keep their cache."""
    varying = {n.get("name") for n in template.get("nodes", []) if search_space.references(n)}
    for node in spec.get("nodes", []):
        if node.get("name") in varying:
            node["cache"] = False
    return spec


def _follow(study: Study, ostudy: Any, trial: Trial, untagged: list[Trial]) -> bool:
    """Report the trial's new intermediate values, prune it if the pruner says so, tell its end. True if it changed.
    A trial whose tracking run may need its study's tags goes on `untagged` (tagged in bulk after the loop)."""
    import optuna
    from optuna.trial import TrialState

    run = trial.run
    if run is None:
        return _end(ostudy, trial, Trial.Status.FAILED, _("Its pipeline run was deleted."))
    changed = False
    # A queued run has started no task yet, so nothing has logged or printed a value.
    points = collect.points(study, trial) if run.status != RunStatus.QUEUED else []
    if points:
        if trial.last_step is None or run.is_finished:  # its tracking run exists now (or never will)
            untagged.append(trial)
        # Optuna needs the intermediate values only to prune (the portal's row keeps the curve for the page).
        pruning = study.early_stopping != EarlyStopping.NONE
        otrial = optuna.trial.Trial(ostudy, trial.optuna_trial_id) if pruning else None
        told = False  # Optuna has it pruned already: told by a pass whose rows rolled back after the tell
        for step, value in points:
            if otrial is not None and not told:
                try:
                    otrial.report(value, step)
                except optuna.exceptions.UpdateFinishedTrialError:
                    told = True
            trial.intermediate[str(step)] = value
        trial.last_step = points[-1][0]
        if not run.is_finished:  # else its end below saves them with its status
            trial.save(update_fields=["intermediate", "last_step"])
        changed = True
        prune = otrial is not None and not run.is_finished and run.status != RunStatus.CANCELLING
        if prune and (told or otrial.should_prune()):
            cancel_run(run)
            step, value = points[-1]
            reason = _("Pruned at step %(step)s: %(metric)s = %(value).4g.") % {
                "step": step, "metric": study.metric_names[0], "value": value,
            }  # fmt: skip
            return _end(ostudy, trial, Trial.Status.PRUNED, reason, state=TrialState.PRUNED, otrial=otrial)
    if not run.is_finished:
        return changed
    if not points:
        untagged.append(trial)
    if run.status == RunStatus.SUCCEEDED:
        values, problem = collect.final_values(study, trial)
        if values is None:
            return _end(ostudy, trial, Trial.Status.FAILED, problem)
        return _end(ostudy, trial, Trial.Status.COMPLETE, "", values=values)
    reason = run.reason or (_("Its run was cancelled.") if run.status == RunStatus.CANCELLED else _("Its run failed."))
    return _end(ostudy, trial, Trial.Status.FAILED, reason)


def _end(
    ostudy: Any, trial: Trial, status: str, reason: str, *, values: list[float] | None = None, state=None, otrial=None
) -> bool:
    from optuna.trial import TrialState

    told = otrial if otrial is not None else trial.number
    if values is not None:
        _tell(ostudy, told, values)
    else:
        _tell(ostudy, told, state=state or TrialState.FAIL)
    trial.status, trial.reason, trial.values, trial.finished_at = status, reason, values or [], timezone.now()
    trial.save(update_fields=["status", "reason", "values", "finished_at", "intermediate", "last_step"])
    return True


def _tag_tracking_runs(study: Study, trials: list[Trial]) -> None:
    """The trials' tracking runs that exist and are not tagged yet: tagged with the study and the trial, and the
    trial's values logged as params `trial.<name>`, in three statements for all of them (one to find them, one
    insert of the params, one of the tags), in the caller's transaction (the pass's, with the trials' ends). A param
    the task logged itself under one of those keys keeps its value (params are immutable)."""
    from apps.models.models import Param, Run, RunTag
    from apps.models.querysets import ACTIVE

    by_run = {t.run_id: t for t in trials}
    runs = list(
        Run.objects.filter(source_pipeline_run_id__in=by_run, lifecycle_stage=ACTIVE)
        .exclude(tags__key="hpo.study")
        .values_list("pk", "source_pipeline_run_id")
    )
    if not runs:
        return
    params, tags = [], []
    for run_id, pipeline_run_id in runs:
        trial = by_run[pipeline_run_id]
        params += [Param(run_id=run_id, key=f"trial.{k}", value=str(v)) for k, v in trial.params.items()]
        tags += [RunTag(run_id=run_id, key="hpo.study", value=study.name)]
        tags += [RunTag(run_id=run_id, key="hpo.trial", value=str(trial.number))]
    Param.objects.bulk_create(params, ignore_conflicts=True)
    RunTag.objects.bulk_create(tags, update_conflicts=True, unique_fields=["run", "key"], update_fields=["value"])


def _update_importance(study: Study, ostudy: Any, complete: int, finished: int = 0, final: bool = False) -> None:
    """The importance of each parameter for the first objective (Optuna's default evaluator, PED-ANOVA in 5.0),
    once two trials have completed. It reads every trial, so it is not redone for every one that ends: after each
    of the first five complete trials, then each tenth, and when the study ends (`final`)."""
    import optuna

    if complete < 2 or len(study.space) < 1:
        return
    if not (final or complete <= 5 or complete // 10 != (complete - finished) // 10):
        return
    try:
        importance = optuna.importance.get_param_importances(
            ostudy, target=(lambda t: t.values[0]) if study.is_multi_objective else None
        )
    except (ValueError, RuntimeError):  # e.g. one value everywhere: nothing to attribute
        return
    study.importance = {k: float(v) for k, v in importance.items()}
    study.save(update_fields=["importance"])


def _finish(study: Study, ostudy: Any, status: str, reason: str) -> None:
    for trial in study.trials.filter(status=Trial.Status.RUNNING).select_related("run"):
        if trial.run is not None and not trial.run.is_finished:
            cancel_run(trial.run)
        _end(ostudy, trial, Trial.Status.FAILED, _("Stopped with the study: %(reason)s") % {"reason": reason})
    study.status, study.reason, study.finished_at = status, reason, timezone.now()
    study.save(update_fields=["status", "reason", "finished_at"])


def finish(study_id: int, status: str, reason: str) -> Study:
    """End a study from outside a pass (a stop by hand): waits for a running pass to let go of it first."""
    import time

    for _attempt in range(100):
        now = timezone.now()
        claimed = (
            Study.objects.filter(pk=study_id, status=Study.Status.RUNNING)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .update(lease_until=now + LEASE)
        )
        if claimed:
            break
        study = Study.objects.get(pk=study_id)
        if study.is_finished:
            return study
        time.sleep(0.1)
    else:
        raise ValidationError({"study": [_("The study is busy; try again in a moment.")]})
    try:
        study = Study.objects.select_related("project").get(pk=study_id)
        _finish(study, storage.load(study, study.trials.count()), status, reason)
    finally:
        Study.objects.filter(pk=study_id).update(lease_until=None)
    _publish(study)
    return study
