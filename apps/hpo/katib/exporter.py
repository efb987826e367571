"""A study written out as a Katib Experiment (apps/hpo/katib/__init__.py says how)."""

from __future__ import annotations

import re
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.hpo import space as search_space
from apps.hpo.katib import (
    API_VERSION,
    EXPORT_ALGORITHMS,
    KIND,
    PLACEHOLDER_RE,
    PRIMARY_CONTAINER,
    SEEDED,
    schema_errors,
)
from apps.hpo.models import EarlyStopping, Study
from apps.jobs.args import to_cli_args
from apps.jobs.services import normalize_spec, resolve_template


def _katib_placeholders(value: Any) -> Any:
    """`${trial.x}` → `${trialParameters.x}`, `${trial.number}` → `${trialParameters.trialName}`, anywhere."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        return "${trialParameters.trialName}" if name == "number" else f"${{trialParameters.{name}}}"

    if isinstance(value, str):
        return search_space.REFERENCE_RE.sub(one, value)
    if isinstance(value, dict):
        return {k: _katib_placeholders(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_katib_placeholders(v) for v in value]
    return value


def _parameter(name: str, param: dict[str, Any]) -> dict[str, Any]:
    if param["type"] == "categorical":
        numeric = all(isinstance(c, int | float) and not isinstance(c, bool) for c in param["choices"])
        return {"name": name, "parameterType": "discrete" if numeric else "categorical",
                "feasibleSpace": {"list": [_text(c) for c in param["choices"]]}}  # fmt: skip
    feasible = {"min": _text(param["low"]), "max": _text(param["high"])}
    if "step" in param:
        feasible["step"] = _text(param["step"])
    if param.get("log"):
        feasible["distribution"] = "logUniform"
    return {"name": name, "parameterType": "int" if param["type"] == "int" else "double", "feasibleSpace": feasible}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _job(study: Study, notes: list[str]) -> dict[str, Any]:
    """The trial spec: one batch/v1 Job running the study's one-node template with Katib's placeholders."""
    from apps.jobs.dispatcher import task_image
    from apps.runtime.kubernetes.manifests.pod import _PYTHON_TOKEN
    from portal.lib.resources import Resources

    nodes = study.template.get("nodes") or []
    if len(nodes) != 1:
        raise ValidationError({"trial_template": [_("A Katib trial is one Job: only a study whose trial template "
                                                    "has one node can be exported.")]})  # fmt: skip
    node = nodes[0]
    template = resolve_template(study.project, node["template"])
    if template is None:
        raise ValidationError({"trial_template": [_("Its job template no longer exists.")]})
    # Arguments complete with the template's defaults (checked with one point of the space), then the ones that
    # refer to the trial's parameters written as Katib placeholders.
    example = search_space.fill(study.template, search_space.example_values(study.space), 0)
    args = normalize_spec(study.project, example)["nodes"][0]["args"]
    for key, raw in (node.get("args") or {}).items():
        if search_space.references(raw):
            args[key] = _katib_placeholders(raw)
    command = [
        "python" if _PYTHON_TOKEN.match(t) else t for t in [*template.command, *to_cli_args(template.args_schema, args)]
    ]
    env = {"MLFLOW_EXPERIMENT_NAME": study.name, **(study.template.get("env") or {}), **(node.get("env") or {}),
           "HPO_STUDY": study.name}  # fmt: skip
    container: dict[str, Any] = {
        "name": PRIMARY_CONTAINER,
        "image": task_image(template),
        "command": command,
        "env": [{"name": k, "value": str(_katib_placeholders(v))} for k, v in env.items()],
    }
    resources = Resources.parse({**(template.resources or {}), **(node.get("resources") or {})}).kubernetes()
    if any(resources.values()):
        container["resources"] = {k: v for k, v in resources.items() if v}
    if study.collector_kind == "tracking":
        notes.append(_("The trial's task logs its metrics to the portal's MLflow API; Katib's StdOut collector "
                       "needs “%(metric)s=<value>” lines on stdout (or a metrics collector of your choice).")
                     % {"metric": study.metric_names[0]})  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": int(node.get("retries") or 0),
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        },
    }


def to_experiment(study: Study) -> tuple[dict[str, Any], list[str]]:
    """The study as a Katib Experiment (checked against k8s/crds/), and what is carried over only approximately."""
    if study.algorithm not in EXPORT_ALGORITHMS:
        raise ValidationError({"algorithm": [_("%(name)s has no Katib equivalent.") % {"name": study.algorithm}]})
    notes: list[str] = []
    first = study.objectives[0]
    objective: dict[str, Any] = {"type": first["direction"], "objectiveMetricName": first["metric"]}
    if study.goal is not None:
        objective["goal"] = study.goal
    if study.is_multi_objective:
        objective["additionalMetricNames"] = study.metric_names[1:]
        notes.append(_("Katib optimises one objective: %(metric)s; the others are additional metrics.")
                     % {"metric": first["metric"]})  # fmt: skip
    objective["metricStrategies"] = [{"name": o["metric"], "value": o.get("strategy", "latest")}
                                     for o in study.objectives]  # fmt: skip
    algorithm = EXPORT_ALGORITHMS[study.algorithm]
    spec: dict[str, Any] = {
        "objective": objective,
        "algorithm": {"algorithmName": algorithm, **({"algorithmSettings": [
            {"name": "random_state", "value": str(study.seed)}]} if algorithm in SEEDED else {})},
        "parallelTrialCount": study.parallel_trials,
        "maxTrialCount": study.max_trials,
        "maxFailedTrialCount": study.max_failed_trials,
    }  # fmt: skip
    if study.early_stopping == EarlyStopping.MEDIAN:
        options = study.early_stopping_settings
        spec["earlyStopping"] = {"algorithmName": "medianstop", "algorithmSettings": [
            {"name": "min_trials_required", "value": str(options.get("n_startup_trials", 5))},
            {"name": "start_step", "value": str(options.get("n_warmup_steps", 0))},
        ]}  # fmt: skip
    elif study.early_stopping != EarlyStopping.NONE:
        notes.append(_("Early stopping “%(name)s” has no Katib equivalent and was left out.")
                     % {"name": study.early_stopping})  # fmt: skip
    if study.collector_kind == "stdout":
        source = {"filter": {"metricsFormat": study.collector["formats"]}}
        spec["metricsCollectorSpec"] = {"collector": {"kind": "StdOut"}, "source": source}
    if study.deadline is not None:
        notes.append(_("Katib has no deadline; the study's (%(when)s) was left out.") % {"when": study.deadline})
    spec["parameters"] = [_parameter(name, param) for name, param in study.space.items()]
    if any("condition" in p for p in study.space.values()):
        notes.append(_("Katib has no conditional parameters: they are sampled on every trial."))
    job = _job(study, notes)
    used = set(PLACEHOLDER_RE.findall(yaml.safe_dump(job)))
    spec["trialTemplate"] = {
        "primaryContainerName": PRIMARY_CONTAINER,
        "trialParameters": [{"name": n, "description": _("Study parameter %(name)s") % {"name": n}, "reference": n}
                            for n in study.space if n in used]
        + ([{"name": "trialName", "description": _("The trial's name"), "reference": "${trialSpec.Name}"}]
           if "trialName" in used else []),
        "trialSpec": job,
    }  # fmt: skip
    experiment = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": study.name}, "spec": spec}
    problems = schema_errors(experiment)
    if problems:  # our own mistake, or a template whose values Kubernetes refuses: said, never sent
        raise ValidationError({f"katib.{k}": v for k, v in problems.items()})
    return experiment, notes


def dump(experiment: dict[str, Any], notes: list[str]) -> str:
    header = "".join(f"# {line}\n" for line in notes)
    return header + yaml.safe_dump(experiment, sort_keys=False, allow_unicode=True)
