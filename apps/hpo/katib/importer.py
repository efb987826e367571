"""A Katib Experiment read into a study's definition (apps/hpo/katib/__init__.py says how)."""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.hpo import storage
from apps.hpo.katib import ALGORITHMS, METADATA_RE, PLACEHOLDER_RE, SEEDED, schema_errors
from apps.hpo.models import Algorithm, EarlyStopping
from apps.jobs.args import FieldErrors


def _stringify(experiment: dict[str, Any]) -> dict[str, Any]:
    """Katib's bounds and settings are strings; YAML written by hand often has numbers there. Accept both."""
    experiment = copy.deepcopy(experiment)
    spec = experiment.get("spec")
    if not isinstance(spec, dict):
        return experiment
    parameters = spec.get("parameters")
    for param in parameters if isinstance(parameters, list) else []:
        feasible = param.get("feasibleSpace") if isinstance(param, dict) else None
        if isinstance(feasible, dict):
            for key in ("min", "max", "step"):
                if isinstance(feasible.get(key), int | float) and not isinstance(feasible.get(key), bool):
                    feasible[key] = str(feasible[key])
            if isinstance(feasible.get("list"), list):
                feasible["list"] = [str(v) if isinstance(v, int | float | bool) else v for v in feasible["list"]]
    for key in ("algorithm", "earlyStopping"):
        settings = spec[key].get("algorithmSettings") if isinstance(spec.get(key), dict) else None
        for setting in settings if isinstance(settings, list) else []:
            if isinstance(setting, dict) and isinstance(setting.get("value"), int | float):
                setting["value"] = str(setting["value"])
    return experiment


def _number(text: str, kind: str, where: str, errors: FieldErrors) -> int | float | None:
    try:
        value = float(text)
    except ValueError:
        errors.add(where, _("“%(value)s” is not a number.") % {"value": text})
        return None
    if kind == "int":
        if not value.is_integer():
            errors.add(where, _("“%(value)s” is not an integer.") % {"value": text})
            return None
        return int(value)
    return value


def _discrete(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _param_name(name: str) -> str:
    """Katib allows names like `num-layers`; the portal's are identifiers (they appear as `${trial.<name>}`)."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return clean if re.match(r"^[A-Za-z_]", clean) else f"p_{clean}"


def _space(parameters: list[dict[str, Any]], errors: FieldErrors) -> tuple[dict, dict[str, str], dict[str, str]]:
    """(the space, Katib name → portal name, portal name → Katib path)."""
    space: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    paths: dict[str, str] = {}
    for i, param in enumerate(parameters):
        where = f"spec.parameters[{i}]"
        name, kind, feasible = param["name"], param["parameterType"], param["feasibleSpace"]
        portal = _param_name(name)
        if portal in space:
            errors.add(f"{where}.name", _("Another parameter has this name (as %(name)s).") % {"name": portal})
            continue
        names[name], paths[portal] = portal, where
        if kind in ("categorical", "discrete"):
            choices: list[Any] = list(feasible["list"])
            if kind == "discrete":
                choices = [_discrete(v) for v in feasible["list"]]
                if None in choices:
                    errors.add(f"{where}.feasibleSpace.list", _("A discrete parameter's values must be numbers."))
                    continue
            space[portal] = {"type": "categorical", "choices": choices}
            continue
        portal_kind = "int" if kind == "int" else "float"
        low = _number(feasible["min"], portal_kind, f"{where}.feasibleSpace.min", errors)
        high = _number(feasible["max"], portal_kind, f"{where}.feasibleSpace.max", errors)
        spec: dict[str, Any] = {"type": portal_kind, "low": low, "high": high}
        if "step" in feasible:
            spec["step"] = _number(feasible["step"], portal_kind, f"{where}.feasibleSpace.step", errors)
        distribution = feasible.get("distribution", "uniform")
        if distribution == "logUniform":
            spec["log"] = True
        elif distribution != "uniform":
            errors.add(f"{where}.feasibleSpace.distribution", _("Only uniform and logUniform have an equivalent "
                                                                "here (Optuna samples within bounds)."))  # fmt: skip
        space[portal] = spec
    return space, names, paths


def _settings(spec: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s.get("value", "") for s in spec.get("algorithmSettings") or []}


def _algorithm(spec: dict[str, Any], space: dict, errors: FieldErrors, notes: list[str]) -> dict[str, Any]:
    """The document's algorithm, seed and early stopping from Katib's algorithm (and Hyperband's resource)."""
    where = "spec.algorithm"
    name = spec["algorithm"]["algorithmName"]
    settings = _settings(spec["algorithm"])
    out: dict[str, Any] = {}
    if name == "hyperband":
        # Katib's Hyperband is a suggestion service that sets a resource parameter per bracket; here Optuna's
        # Hyperband pruner stops trials early instead, and every trial gets the full resource (r_l).
        resource, r_l, eta = settings.get("resource_name"), settings.get("r_l"), settings.get("eta", "3")
        if not r_l or not str(r_l).isdigit() or int(r_l) < 1:
            errors.add(f"{where}.algorithmSettings", _("Hyperband needs r_l, a whole number of at least 1."))
            return out
        if not str(eta).isdigit() or int(eta) < 2:
            errors.add(f"{where}.algorithmSettings", _("Hyperband's eta must be a whole number of at least 2."))
            return out
        portal = _param_name(resource) if resource else None
        if portal in space:
            space[portal] = {"type": "categorical", "choices": [int(r_l)]}
        out.update(algorithm=Algorithm.RANDOM, early_stopping={
            "algorithm": EarlyStopping.HYPERBAND, "min_resource": 1, "max_resource": int(r_l),
            "reduction_factor": int(eta),
        })  # fmt: skip
        notes.append(_("Hyperband became random sampling with Optuna's Hyperband pruner (max_resource %(r)s, "
                       "reduction factor %(eta)s); every trial gets %(resource)s = %(r)s and is stopped early "
                       "instead.") % {"r": r_l, "eta": eta, "resource": resource or "-"})  # fmt: skip
        return out
    algorithm = ALGORITHMS.get(name)
    if algorithm is None:
        known = ", ".join([*ALGORITHMS, "hyperband"])
        errors.add(f"{where}.algorithmName", _("“%(name)s” has no equivalent here (known: %(known)s).")
                   % {"name": name, "known": known})  # fmt: skip
        return out
    if algorithm == Algorithm.GP and not storage.gp_available():
        errors.add(f"{where}.algorithmName", _("bayesianoptimization maps to the Gaussian-process sampler, which "
                                               "needs PyTorch in the portal; use tpe."))  # fmt: skip
        return out
    out["algorithm"] = algorithm
    if name == "multivariate-tpe":
        notes.append(_("multivariate-tpe became tpe (independent per parameter)."))
    seed = settings.pop("random_state", None)
    if seed is not None and name in SEEDED:
        if not str(seed).isdigit():
            errors.add(f"{where}.algorithmSettings", _("random_state must be a whole number."))
        else:
            out["seed"] = int(seed)
    if settings:
        notes.append(_("Algorithm settings not carried over: %(names)s.") % {"names": ", ".join(sorted(settings))})
    return out


def _early_stopping(spec: dict[str, Any], errors: FieldErrors, notes: list[str]) -> Any:
    early = spec.get("earlyStopping")
    if not early:
        return None
    where = "spec.earlyStopping"
    if early["algorithmName"] != "medianstop":
        errors.add(f"{where}.algorithmName", _("Only medianstop has an equivalent here (the median pruner)."))
        return None
    settings = _settings(early)
    out: dict[str, Any] = {"algorithm": EarlyStopping.MEDIAN}
    # Katib's defaults: min_trials_required 3, start_step 4 (pkg/earlystopping/v1beta1/medianstop/service.py).
    for katib, optuna, default in (("min_trials_required", "n_startup_trials", 3), ("start_step", "n_warmup_steps", 4)):
        value = settings.pop(katib, str(default))
        if not str(value).isdigit():
            errors.add(f"{where}.algorithmSettings", _("%(name)s must be a whole number.") % {"name": katib})
            continue
        out[optuna] = int(value)
    if settings:
        errors.add(f"{where}.algorithmSettings", _("medianstop takes min_trials_required and start_step."))
    return out


def _container(trial_spec: dict[str, Any], primary: str | None, errors: FieldErrors, notes: list[str]) -> Any:
    where = "spec.trialTemplate.trialSpec"
    if (trial_spec.get("apiVersion"), trial_spec.get("kind")) != ("batch/v1", "Job"):
        errors.add(f"{where}.kind", _("Only a batch/v1 Job can become a trial here (a trial is one portal task)."))
        return None
    pod = ((trial_spec.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if primary:
        chosen = [c for c in containers if c.get("name") == primary]
        if not chosen:
            errors.add("spec.trialTemplate.primaryContainerName", _("No container of the trial spec has this name."))
            return None
    elif len(containers) != 1:
        errors.add("spec.trialTemplate.primaryContainerName", _("Name the container that trains (several)."))
        return None
    else:
        chosen = containers
    container = chosen[0]
    index = containers.index(container)
    if not (container.get("command") or container.get("args")):
        errors.add(f"{where}.spec.template.spec.containers[{index}].command",
                   _("Give the command: the image's own entrypoint does not run here."))  # fmt: skip
        return None
    others = [c.get("name") for c in containers if c is not container] + [
        c.get("name") for c in pod.get("initContainers") or []
    ]
    if others:
        notes.append(_("Containers not carried over: %(names)s.") % {"names": ", ".join(map(str, others))})
    return container


def _trial_template(
    template: dict[str, Any],
    names: dict[str, str],
    study_name: str,
    namespace: str,
    errors: FieldErrors,
    notes: list[str],
) -> dict[str, Any] | None:
    """The trial as the built-in `shell` task running the Job's command, with `${trialParameters.x}` replaced by
    `${trial.<parameter>}` (Katib substitutes text, so does the portal inside a script)."""
    where = "spec.trialTemplate"
    if "configMap" in template:
        errors.add(f"{where}.configMap", _("A ConfigMap on the cluster cannot be read here; paste its trial spec "
                                           "as trialSpec."))  # fmt: skip
        return None
    replacement: dict[str, str] = {}
    for i, declared in enumerate(template.get("trialParameters") or []):
        reference = declared["reference"]
        metadata = METADATA_RE.match(reference)
        if reference in names:
            replacement[declared["name"]] = f"${{trial.{names[reference]}}}"
        elif metadata:
            replacement[declared["name"]] = {
                "Name": f"{study_name}-trial-${{trial.number}}", "Namespace": namespace, "Kind": "Job",
                "APIVersion": "batch/v1",
            }[metadata.group(1)]  # fmt: skip
        else:
            errors.add(f"{where}.trialParameters[{i}].reference",
                       _("Must name a parameter of spec.parameters or ${trialSpec.Name}."))  # fmt: skip
    container = _container(template["trialSpec"], template.get("primaryContainerName"), errors, notes)
    if container is None:
        return None
    used = set(PLACEHOLDER_RE.findall(yaml.safe_dump(container)))
    for name in sorted(used - set(replacement)):
        if not any(d["name"] == name for d in template.get("trialParameters") or []):
            errors.add(f"{where}.trialParameters", _("${trialParameters.%(name)s} is used but not declared.")
                       % {"name": name})  # fmt: skip
    if errors:
        return None

    def substitute(text: str) -> str:
        return PLACEHOLDER_RE.sub(lambda m: replacement.get(m.group(1), m.group(0)), text)

    tokens = [*(container.get("command") or []), *(container.get("args") or [])]
    script = substitute(" ".join(_quote_with_placeholders(str(token)) for token in tokens))
    node: dict[str, Any] = {"name": "trial", "template": "shell", "args": {"script": script}}
    env = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = substitute(str(item["value"]))
        else:
            notes.append(_("Environment variable %(name)s (valueFrom) not carried over.") % {"name": item["name"]})
    if env:
        node["env"] = env
    resources = container.get("resources") or {}
    amounts = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    wanted = {k: amounts[k] for k in ("cpu", "memory") if k in amounts}
    if "nvidia.com/gpu" in amounts:
        wanted["gpu"] = amounts["nvidia.com/gpu"]
    if wanted:
        node["resources"] = wanted
    message = _(
        "The trial runs the container's command as the built-in shell task (image %(image)s is not pulled "
        "on the local runtime)."
    )
    notes.append(message % {"image": container.get("image", "-")})
    return {"spec": {"nodes": [node]}}


def _quote_with_placeholders(token: str) -> str:
    """Quote a command token for sh while leaving `${trialParameters.x}` where the value will be written: the
    value goes inside double quotes (so a categorical value with spaces stays one argument)."""
    parts = PLACEHOLDER_RE.split(token)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f'"${{trialParameters.{part}}}"')
        elif part:
            out.append(shlex.quote(part))
    return "".join(out)


def _collector(spec: dict[str, Any], errors: FieldErrors, notes: list[str]) -> dict[str, Any]:
    collector = spec.get("metricsCollectorSpec") or {}
    kind = (collector.get("collector") or {}).get("kind", "StdOut")
    if kind in ("None", "Push"):
        notes.append(_("Metrics collector %(kind)s: the trial must log its metrics to the portal's MLflow API.")
                     % {"kind": kind})  # fmt: skip
        return {"kind": "tracking"}
    if kind != "StdOut":
        errors.add("spec.metricsCollectorSpec.collector.kind", _("Only StdOut, None and Push have an equivalent "
                                                                 "here."))  # fmt: skip
        return {}
    formats = ((collector.get("source") or {}).get("filter") or {}).get("metricsFormat")
    return {"kind": "stdout", **({"formats": formats} if formats else {})}


def to_document(
    experiment: Any, name: str | None = None, namespace: str = ""
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """A Katib Experiment → (the study's definition, document key → Katib path for its errors, notes).
    ValidationError keyed by Katib paths when it breaks the schema or has no equivalent here."""
    experiment = _stringify(experiment) if isinstance(experiment, dict) else experiment
    problems = schema_errors(experiment)
    if problems:
        raise ValidationError(problems)
    errors, notes = FieldErrors(), []
    spec = experiment["spec"]
    objective = spec["objective"]
    metric, direction = objective["objectiveMetricName"], objective["type"]
    # Katib's default strategy for the objective is its direction's extreme (experiment defaults), latest for others.
    strategies = {s["name"]: s["value"] for s in objective.get("metricStrategies") or []}
    strategy = strategies.get(metric, "max" if direction == "maximize" else "min")
    document: dict[str, Any] = {
        "name": name or experiment["metadata"]["name"],
        "description": _("Imported from Katib Experiment %(name)s.") % {"name": experiment["metadata"]["name"]},
        "objectives": [{"metric": metric, "direction": direction, "strategy": strategy}],
    }
    if "goal" in objective:
        document["objectives"][0]["goal"] = objective["goal"]
    if objective.get("additionalMetricNames"):
        notes.append(_("Additional metrics (%(names)s) are not objectives here; they stay in the trials' logs.")
                     % {"names": ", ".join(objective["additionalMetricNames"])})  # fmt: skip
    space, names, paths = _space(spec["parameters"], errors)
    document.update(_algorithm(spec, space, errors, notes))
    document["space"] = space
    early = _early_stopping(spec, errors, notes)
    if early is not None:
        if "early_stopping" in document:
            errors.add("spec.earlyStopping", _("Hyperband already stops trials early."))
        document["early_stopping"] = early
    max_trials = spec.get("maxTrialCount")
    if max_trials is None:
        max_trials = 10
        notes.append(_("No maxTrialCount: the study runs %(n)s trials.") % {"n": max_trials})
    document["budget"] = {
        "max_trials": max_trials,
        "parallel_trials": min(spec.get("parallelTrialCount", 3), max_trials),  # Katib's default: 3
        "max_failed_trials": spec.get("maxFailedTrialCount", 3),
    }
    document["metrics_collector"] = _collector(spec, errors, notes)
    if "nasConfig" in spec:
        errors.add("spec.nasConfig", _("Neural architecture search has no equivalent here."))
    template = _trial_template(spec["trialTemplate"], names, document["name"], namespace, errors, notes)
    errors.raise_if_any()
    document["trial_template"] = template
    where = {"name": "metadata.name", "objectives": "spec.objective", "algorithm": "spec.algorithm.algorithmName",
             "early_stopping": "spec.earlyStopping", "budget.max_trials": "spec.maxTrialCount",
             "budget.parallel_trials": "spec.parallelTrialCount",
             "budget.max_failed_trials": "spec.maxFailedTrialCount", "metrics_collector": "spec.metricsCollectorSpec",
             "trial_template": "spec.trialTemplate", "seed": "spec.algorithm.algorithmSettings",
             **{f"space.{p}": path for p, path in paths.items()}}  # fmt: skip
    return document, where, notes


BOUND_KEYS = {"low": "feasibleSpace.min", "high": "feasibleSpace.max", "step": "feasibleSpace.step",
              "choices": "feasibleSpace.list", "log": "feasibleSpace.distribution"}  # fmt: skip


def katib_path(key: str, where: dict[str, str]) -> str:
    """A definition's error key (`space.lr.high`) as the Katib path it came from."""
    best = max((k for k in where if key == k or key.startswith(f"{k}.")), key=len, default=None)
    if best is None:
        return key
    rest = key[len(best) + 1 :]
    return ".".join(filter(None, [where[best], BOUND_KEYS.get(rest, rest)]))
