"""Katib compatibility: a Katib `Experiment` (kubeflow.org/v1beta1) read into a study's definition, and a study
written out as an Experiment for teams moving to a cluster with Katib.

Both directions go through the Experiment's JSON schema in k8s/crds/ (Katib's Go types, its webhook's checks; a
trial spec that is a batch/v1 Job is checked as Kubernetes checks a Job), so a bad import names the exact path
(`spec.parameters[1].feasibleSpace.min`) and an export is what Katib's API server accepts. What has no equivalent
either way is refused with its path; what is carried over approximately is said in the notes returned beside.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.hpo.models import Algorithm

API_VERSION, KIND = "kubeflow.org/v1beta1", "Experiment"
KUBERNETES_VERSION = "1.33"
PLACEHOLDER_RE = re.compile(r"\$\{trialParameters\.([^{}]+)\}")
METADATA_RE = re.compile(r"^\$\{trialSpec\.(Name|Namespace|Kind|APIVersion)\}$")
# Katib's algorithm names (katib-config.yaml; docs/hpo.md) → the portal's.
ALGORITHMS = {
    "random": Algorithm.RANDOM, "grid": Algorithm.GRID, "tpe": Algorithm.TPE, "multivariate-tpe": Algorithm.TPE,
    "cmaes": Algorithm.CMAES, "sobol": Algorithm.SOBOL, "bayesianoptimization": Algorithm.GP,
}  # fmt: skip
EXPORT_ALGORITHMS = {
    Algorithm.RANDOM: "random", Algorithm.GRID: "grid", Algorithm.TPE: "tpe", Algorithm.CMAES: "cmaes",
    Algorithm.SOBOL: "sobol", Algorithm.GP: "bayesianoptimization",
}  # fmt: skip
SEEDED = {"random", "tpe", "multivariate-tpe", "cmaes", "sobol", "bayesianoptimization"}
PRIMARY_CONTAINER = "training-container"  # Katib's examples' name


def parse(text: Any) -> Any:
    """YAML text (or an already parsed mapping) → the object; a YAML error is a field error."""
    if not isinstance(text, str):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError({"experiment": [_("Not valid YAML: %(error)s") % {"error": exc}]}) from None


def is_experiment(document: Any) -> bool:
    return isinstance(document, dict) and document.get("kind") == KIND and "apiVersion" in document


def schema_errors(obj: Any) -> dict[str, list[str]]:
    """Every place where `obj` breaks the Experiment schema, keyed by its path."""
    from apps.runtime.kubernetes.validation import schema_errors as errors_of

    if not isinstance(obj, dict):
        return {"experiment": [_("Must be a Katib Experiment (a YAML mapping).")]}
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        return {"kind": [_("Must be apiVersion %(v)s, kind %(k)s.") % {"v": API_VERSION, "k": KIND}]}
    return errors_of(obj, KUBERNETES_VERSION)


from apps.hpo.katib.exporter import dump, to_experiment  # noqa: E402 (they use the names above)
from apps.hpo.katib.importer import katib_path, to_document  # noqa: E402

__all__ = ["dump", "is_experiment", "katib_path", "parse", "schema_errors", "to_document", "to_experiment"]
