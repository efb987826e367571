"""Study workflows: create (from a form, the API or a YAML document, all validated here), stop, register the best
trial's model. The driver that runs trials is apps/hpo/driver.py."""

from __future__ import annotations

import copy
import math
import re
import secrets
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.hpo import space as search_space
from apps.hpo import storage
from apps.hpo.models import Algorithm, EarlyStopping, Study, Trial
from apps.jobs.args import FieldErrors
from apps.jobs.models import Pipeline
from apps.jobs.services import normalize_spec
from apps.outbox.services import enqueue
from apps.projects.models import Project, slug_validator
from apps.projects.permissions import CONTRIBUTE, has_project_perm

DIRECTIONS = ("minimize", "maximize")
MULTI_OBJECTIVE_ALGORITHMS = {Algorithm.RANDOM, Algorithm.GRID, Algorithm.TPE, Algorithm.SOBOL, Algorithm.NSGA2}
MAX_TRIALS = 10_000
MAX_PARALLEL = 100
DOCUMENT_KEYS = {
    "name", "description", "objectives", "objective", "space", "algorithm", "early_stopping", "budget", "seed",
    "trial_template", "metrics_collector",
}  # fmt: skip
STRATEGIES = ("latest", "min", "max")
COLLECTORS = ("tracking", "stdout")
# Katib's StdOut collector's default filter: `name=value` anywhere in a line (metrics_collector.go, DefaultFilter).
DEFAULT_STDOUT_FORMAT = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
BUDGET_KEYS = {"max_trials", "parallel_trials", "max_failed_trials", "deadline"}


def _int(value: Any, key: str, errors: FieldErrors, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.add(key, _("Must be an integer from %(low)s to %(high)s.") % {"low": low, "high": high})
        return None
    return value


def _objectives(document: dict[str, Any], errors: FieldErrors) -> list[dict[str, str]]:
    raw = document.get("objectives")
    if raw is None and "objective" in document:
        raw = [document["objective"]]
    if not isinstance(raw, list) or not raw:
        errors.add("objectives", _("Give at least one objective: a metric name and minimize or maximize."))
        return []
    clean = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            errors.add(f"objectives.{i}", _("Must be a mapping with “metric” and “direction”."))
            continue
        metric, direction = item.get("metric"), item.get("direction", "maximize")
        if not isinstance(metric, str) or not metric.strip() or len(metric) > 250:
            errors.add(f"objectives.{i}.metric", _("Must be the name of a metric the trials log (up to 250)."))
            continue
        if direction not in DIRECTIONS:
            errors.add(f"objectives.{i}.direction", _("Must be minimize or maximize."))
            continue
        for key in sorted(set(item) - {"metric", "direction", "strategy", "goal"}, key=str):
            errors.add(f"objectives.{i}.{key}", _("Unknown setting (an objective takes metric, direction, strategy, "
                                                  "goal)."))  # fmt: skip
        objective: dict[str, Any] = {"metric": metric.strip(), "direction": direction}
        strategy = item.get("strategy", "latest")
        if strategy not in STRATEGIES:
            errors.add(f"objectives.{i}.strategy", _("Must be one of: %(names)s.") % {"names": ", ".join(STRATEGIES)})
        elif strategy != "latest":
            objective["strategy"] = strategy
        goal = item.get("goal")
        if goal is not None:
            if isinstance(goal, bool) or not isinstance(goal, int | float) or not math.isfinite(goal):
                errors.add(f"objectives.{i}.goal", _("Must be a number."))
            elif len(raw) > 1:
                errors.add(f"objectives.{i}.goal", _("A goal needs a single objective."))
            else:
                objective["goal"] = float(goal)
        clean.append(objective)
    if len({o["metric"] for o in clean}) != len(clean):
        errors.add("objectives", _("Each metric may appear once."))
    return clean


def _collector(value: Any, errors: FieldErrors) -> dict[str, Any]:
    """Where the trials' metrics are read: the tracking API (default) or `name=value` lines on stdout."""
    if value in (None, "", "tracking", {"kind": "tracking"}):
        return {}
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict) or value.get("kind") not in COLLECTORS:
        errors.add("metrics_collector.kind", _("Must be one of: %(names)s.") % {"names": ", ".join(COLLECTORS)})
        return {}
    for key in sorted(set(value) - {"kind", "formats"}, key=str):
        errors.add(f"metrics_collector.{key}", _("Unknown setting."))
    if value["kind"] == "tracking":
        if "formats" in value:
            errors.add("metrics_collector.formats", _("Only the stdout collector takes formats."))
        return {}
    formats = value.get("formats") or [DEFAULT_STDOUT_FORMAT]
    if not isinstance(formats, list) or not all(isinstance(f, str) and f for f in formats):
        errors.add("metrics_collector.formats", _("Must be a list of regular expressions."))
        return {}
    for i, pattern in enumerate(formats):
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            errors.add(f"metrics_collector.formats.{i}", _("Not a regular expression: %(error)s") % {"error": exc})
            continue
        if groups < 2:
            errors.add(f"metrics_collector.formats.{i}", _("Needs two groups: the metric's name, then its value."))
    return {"kind": "stdout", "formats": formats}


def _early_stopping(value: Any, objectives: list, errors: FieldErrors) -> tuple[str, dict[str, Any]]:
    if value in (None, "", "none"):
        return EarlyStopping.NONE, {}
    if isinstance(value, str):
        value = {"algorithm": value}
    if not isinstance(value, dict) or value.get("algorithm") not in EarlyStopping.values:
        errors.add(
            "early_stopping.algorithm", _("Must be one of: %(names)s.") % {"names": ", ".join(EarlyStopping.values)}
        )
        return EarlyStopping.NONE, {}
    kind = value["algorithm"]
    settings = {k: v for k, v in value.items() if k != "algorithm"}
    allowed = storage.PRUNER_SETTINGS[kind]
    for key, given in settings.items():
        wanted = allowed.get(key)
        if wanted is None:
            errors.add(f"early_stopping.{key}", _("Not a setting of this rule (it takes: %(keys)s).")
                       % {"keys": ", ".join(allowed) or "-"})  # fmt: skip
        elif (
            isinstance(given, bool)
            or not isinstance(given, int | float)
            or given < 0
            or (wanted is int and not float(given).is_integer())
        ):
            errors.add(f"early_stopping.{key}", _("Must be a non-negative number."))
    if kind == "percentile" and not 0 <= float(settings.get("percentile", 25)) <= 100:
        errors.add("early_stopping.percentile", _("Must be from 0 to 100."))
    if kind != EarlyStopping.NONE and len(objectives) > 1:
        errors.add("early_stopping", _("Early stopping needs a single objective."))
    return kind, {k: (int(v) if allowed.get(k) is int else float(v)) for k, v in settings.items() if k in allowed
                  and isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip


def _budget(value: Any, errors: FieldErrors) -> dict[str, Any]:
    value = value if value is not None else {}
    if not isinstance(value, dict):
        errors.add("budget", _("Must be a mapping (max_trials, parallel_trials, max_failed_trials, deadline)."))
        return {}
    for key in sorted(set(value) - BUDGET_KEYS):
        errors.add(f"budget.{key}", _("Unknown budget setting."))
    budget = {
        "max_trials": _int(value.get("max_trials", 10), "budget.max_trials", errors, 1, MAX_TRIALS),
        "parallel_trials": _int(value.get("parallel_trials", 1), "budget.parallel_trials", errors, 1, MAX_PARALLEL),
        "max_failed_trials": _int(value.get("max_failed_trials", 3), "budget.max_failed_trials", errors, 0, MAX_TRIALS),
        "deadline": None,
    }
    deadline = value.get("deadline")
    if deadline not in (None, ""):
        parsed = deadline if isinstance(deadline, datetime) else parse_datetime(str(deadline))
        if parsed is None:
            errors.add("budget.deadline", _("Must be a date and time (ISO 8601)."))
        else:
            if timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed, timezone.UTC)
            if parsed <= timezone.now():
                errors.add("budget.deadline", _("Must be in the future."))
            budget["deadline"] = parsed
    if budget["parallel_trials"] and budget["max_trials"] and budget["parallel_trials"] > budget["max_trials"]:
        errors.add("budget.parallel_trials", _("Cannot exceed max_trials."))
    return budget


def _template(project: Project, value: Any, errors: FieldErrors) -> tuple[dict[str, Any], Pipeline | None]:
    """The trial template as a pipeline spec: `{pipeline: <name>, args: {node: {arg: value}}}` (a saved pipeline,
    some arguments replaced), `{job_template: <slug>, args: {...}}` (a one-node pipeline) or `{spec: {...}}`."""
    key = "trial_template"
    if not isinstance(value, dict) or len({"pipeline", "job_template", "spec"} & set(value)) != 1:
        errors.add(key, _("Name one of: a pipeline, a job template, or a pipeline spec."))
        return {}, None
    args = value.get("args", {})
    if not isinstance(args, dict):
        errors.add(f"{key}.args", _("Must be a mapping."))
        return {}, None
    if "pipeline" in value:
        pipeline = Pipeline.objects.filter(project=project, name=value["pipeline"]).first()
        if pipeline is None:
            errors.add(f"{key}.pipeline", _("No pipeline “%(name)s” in this project.") % {"name": value["pipeline"]})
            return {}, None
        spec = copy.deepcopy(pipeline.spec)
        nodes = {n["name"]: n for n in spec.get("nodes", [])}
        for node, node_args in args.items():
            if node not in nodes or not isinstance(node_args, dict):
                errors.add(f"{key}.args", _("“%(node)s” is not a node of the pipeline.") % {"node": node})
                continue
            nodes[node]["args"] = {**nodes[node].get("args", {}), **node_args}
        return spec, pipeline
    if "job_template" in value:
        node = {"name": "trial", "template": value["job_template"], "args": args}
        return {"nodes": [node]}, None
    if not isinstance(value["spec"], dict):
        errors.add(f"{key}.spec", _("Must be a pipeline spec (a mapping with nodes)."))
        return {}, None
    return copy.deepcopy(value["spec"]), None


def _check_template(project: Project, template: dict, space: dict, errors: FieldErrors) -> None:
    unknown = sorted(search_space.references(template) - set(space) - {"number"})
    if unknown:
        errors.add("trial_template", _("Refers to parameters not in the space: %(names)s.")
                   % {"names": ", ".join(unknown)})  # fmt: skip
        return
    example = search_space.fill(template, search_space.example_values(space), 0)
    try:
        normalize_spec(project, example)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                errors.add(f"trial_template.{field}", message)


def validate_document(project: Project, document: Any) -> dict[str, Any]:
    """A study's whole definition (the YAML/API shape) checked at once: ValidationError naming every bad field."""
    errors = FieldErrors()
    if not isinstance(document, dict):
        raise ValidationError({"document": [_("Must be a mapping.")]})
    for key in sorted(set(document) - DOCUMENT_KEYS):
        errors.add(key, _("Unknown setting."))
    name = document.get("name")
    try:
        slug_validator(name if isinstance(name, str) else "")
        if not name or len(name) > 80:
            raise ValidationError("")
    except ValidationError:
        errors.add("name", _("Use 1–80 lowercase letters, digits and hyphens."))
    else:
        if Study.objects.filter(project=project, name=name).exists():
            errors.add("name", _("A study with this name already exists in the project."))
    objectives = _objectives(document, errors)
    space = search_space.validate_space(document.get("space"), errors)
    algorithm = document.get("algorithm", Algorithm.TPE)
    if algorithm not in Algorithm.values:
        errors.add("algorithm", _("Must be one of: %(names)s.") % {"names": ", ".join(Algorithm.values)})
    elif len(objectives) > 1 and algorithm not in MULTI_OBJECTIVE_ALGORITHMS:
        errors.add("algorithm", _("This algorithm handles a single objective; for several use nsga2, tpe or random."))
    elif algorithm == Algorithm.GP and not storage.gp_available():
        errors.add("algorithm", _("The Gaussian-process sampler needs PyTorch, which this portal does not have."))
    elif algorithm == Algorithm.GRID and space:
        if any("condition" in p for p in space.values()):
            errors.add("algorithm", _("A grid search cannot have conditional parameters."))
        else:
            values = search_space.grid(space)
            if values is None:
                errors.add("algorithm", _("A grid search needs a step for every float parameter."))
            elif search_space.grid_size(values) > search_space.MAX_GRID:
                errors.add("algorithm", _("The grid has more than %(n)s points.") % {"n": search_space.MAX_GRID})
    early_stopping, early_settings = _early_stopping(document.get("early_stopping"), objectives, errors)
    budget = _budget(document.get("budget"), errors)
    seed = document.get("seed", secrets.randbelow(2**31))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        errors.add("seed", _("Must be an integer from 0 to 2147483647."))
    description = document.get("description", "")
    if not isinstance(description, str):
        errors.add("description", _("Must be text."))
    collector = _collector(document.get("metrics_collector"), errors)
    template, pipeline = _template(project, document.get("trial_template"), errors)
    if template and space:
        _check_template(project, template, space, errors)
    errors.raise_if_any()
    return {
        "name": name, "description": description, "objectives": objectives, "space": space,
        "algorithm": algorithm, "early_stopping": early_stopping, "early_stopping_settings": early_settings,
        "seed": seed, "template": template, "pipeline": pipeline, "collector": collector, **budget,
    }  # fmt: skip


def create_study(project: Project, user: Any, document: dict[str, Any]) -> Study:
    """Check the definition, make the study (and its Optuna study) and queue its first trials."""
    if user is not None and not has_project_perm(user, project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow starting studies."))
    fields = validate_document(project, document)
    with transaction.atomic():
        study = Study.objects.create(
            project=project, created_by=user, optuna_name=f"portal-{secrets.token_hex(12)}", **fields
        )
        storage.create(study)  # its own storage: a rolled-back row leaves an unused Optuna study, never the reverse
        kick(study)
    return study


def import_katib(project: Project, user: Any, experiment: Any, name: str | None = None) -> tuple[Study, list[str]]:
    """Make a study from a Katib Experiment (YAML text or a mapping): errors keyed by the Experiment's own paths
    (`spec.parameters[0].feasibleSpace.max`), the notes say what was carried over only approximately."""
    from apps.hpo import katib

    if user is not None and not has_project_perm(user, project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow starting studies."))
    document, where, notes = katib.to_document(katib.parse(experiment), name=name or None, namespace=project.slug)
    try:
        return create_study(project, user, document), notes
    except ValidationError as exc:
        errors = FieldErrors()
        for key, messages in exc.message_dict.items():
            for message in messages:
                errors.add(katib.katib_path(key, where), message)
        errors.raise_if_any()
        raise


def export_katib(study: Study) -> tuple[dict[str, Any], list[str]]:
    """The study as a Katib Experiment (checked against its schema in k8s/crds/) and the notes on what differs."""
    from apps.hpo import katib

    return katib.to_experiment(study)


def kick(study: Study) -> None:
    from apps.hpo.tasks import advance_study

    enqueue(advance_study, study.pk)


def kick_for_run(run: Any) -> None:
    """A pipeline run ended (apps.jobs.orchestrator.on_run_finished): if it was a trial's, queue its study's pass."""
    if run.trigger != "study":
        return
    for study_id in Trial.objects.filter(run_id=run.pk, status=Trial.Status.RUNNING).values_list("study_id", flat=True):
        from apps.hpo.tasks import advance_study

        enqueue(advance_study, study_id)


def stop_study(study: Study, reason: str = "") -> Study:
    """Stop asking for trials and cancel the running ones (their runs are cancelled, the trials told failed)."""
    from apps.hpo.driver import finish

    if study.is_finished:
        return study
    return finish(study.pk, Study.Status.STOPPED, reason or _("Stopped by hand."))


def trial_tracking_run(trial: Trial) -> Any:
    """The tracking run the trial's pipeline run logged to (the newest if several)."""
    from apps.models.models import Run

    if trial.run_id is None:
        return None
    return Run.objects.filter(source_pipeline_run_id=trial.run_id).order_by("-start_time", "-pk").first()


def register_best_model(study: Study, user: Any, name: str, artifact_path: str = "model") -> Any:
    """Register the model the best trial's tracking run logged (at `artifact_path`) as the next version of registered
    model `name` (made if new) in the study's project."""
    from apps.models import registry
    from apps.models.errors import TrackingError
    from apps.models.models import RegisteredModel

    if user is not None and not has_project_perm(user, study.project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow registering models."))
    if not isinstance(name, str) or not name.strip():
        raise ValidationError({"name": [_("Give the registered model's name.")]})
    best = study.best_trials()
    if not best:
        raise ValidationError({"study": [_("No trial has completed yet.")]})
    run = trial_tracking_run(best[0])
    if run is None:
        raise ValidationError({"study": [_("The best trial's run logged no tracking run.")]})
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.filter(project=study.project, name=name.strip()).first()
            if model is None:
                model = registry.create_registered_model(study.project, name.strip())
            return registry.create_model_version(
                model,
                source=f"runs:/{run.run_uuid}/{artifact_path}",
                run=run,
                description=_("Best trial (#%(number)s) of study %(study)s")
                % {"number": best[0].number, "study": study.name},
                tags=[("hpo.study", study.name), ("hpo.trial", str(best[0].number))],
            )
    except TrackingError as exc:
        raise ValidationError({"name": [str(exc)]}) from None


def rerun_best(study: Study, user: Any, args: Any = None) -> Any:
    """Run the best trial's pipeline again with its parameters and some arguments replaced (`{node: {arg: value}}`:
    a bigger dataset version, more epochs, a larger split): an ordinary run of the project, not a trial."""
    from apps.jobs.services import start_spec_run

    if user is not None and not has_project_perm(user, study.project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow starting runs."))
    best = study.best_trials()
    if not best:
        raise ValidationError({"study": [_("No trial has completed yet.")]})
    args = args or {}
    template = copy.deepcopy(study.template)  # replaced arguments may use ${trial.<param>} too
    nodes = {n["name"]: n for n in template.get("nodes", [])}
    errors = FieldErrors()
    if not isinstance(args, dict):
        errors.add("args", _("Must be a mapping of node to {argument: value}."))
    else:
        for node, node_args in args.items():
            if node not in nodes:
                errors.add(f"args.{node}", _("Not a node of the trial template (it has: %(names)s).")
                           % {"names": ", ".join(nodes)})  # fmt: skip
            elif not isinstance(node_args, dict):
                errors.add(f"args.{node}", _("Must be a mapping of argument to value."))
            else:
                nodes[node]["args"] = {**nodes[node].get("args", {}), **node_args}
    errors.raise_if_any()
    from apps.hpo.driver import uncached

    spec = uncached(template, search_space.fill(template, best[0].params, best[0].number))
    spec["env"] = {"MLFLOW_EXPERIMENT_NAME": study.name, **(spec.get("env") or {}), "HPO_STUDY": study.name,
                   "HPO_TRIAL": str(best[0].number)}  # fmt: skip
    return start_spec_run(study.project, user, spec, name=f"{study.name}-best-{best[0].number}")


def delete_project_studies(project: Project) -> None:
    """A project is being deleted (inside its transaction): its studies' rows go with it (cascade), and once that
    commits their Optuna studies are deleted from Optuna's storage, which the cascade does not reach."""
    names = list(Study.objects.filter(project=project).values_list("optuna_name", flat=True))
    if names:
        transaction.on_commit(lambda: storage.delete(names))
