"""Experiment tracking (experiments, runs and what they log) and the model registry."""

from apps.models.models.registry import (
    LoggedModel,
    LoggedModelParam,
    LoggedModelTag,
    ModelAlias,
    ModelVersion,
    ModelVersionTag,
    RegisteredModel,
    RegisteredModelTag,
)
from apps.models.models.tracking import (
    ArtifactFile,
    Experiment,
    ExperimentKey,
    ExperimentTag,
    LatestMetric,
    Metric,
    Param,
    Run,
    RunInput,
    RunStatus,
    RunTag,
    now_ms,
)

__all__ = [
    "ArtifactFile",
    "Experiment",
    "ExperimentKey",
    "ExperimentTag",
    "LatestMetric",
    "LoggedModel",
    "LoggedModelParam",
    "LoggedModelTag",
    "Metric",
    "ModelAlias",
    "ModelVersion",
    "ModelVersionTag",
    "Param",
    "RegisteredModel",
    "RegisteredModelTag",
    "Run",
    "RunInput",
    "RunStatus",
    "RunTag",
    "now_ms",
]
