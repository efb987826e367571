"""Train on these labels: the labeling project's annotations exported as a new dataset version, and its training
pipeline started on exactly that version.

The training pipeline is a pipeline of the same project with a `dataset` argument naming the labels dataset
(`<name>-labels`, with any version: `@latest`, `@3`); each such argument is pinned to the new version in the run's
spec, so the run trains on what was just exported even if another export follows. The run is recorded on the
export (`LabelingExport.run`): labeling project → dataset version → run. Started by hand ("Train on these labels",
editors) or by Label Studio's `START_TRAINING` (the ML-backend webhook), which acts as the member who chose the
pipeline, with their rights at that time.
"""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.jobs.models import Pipeline
from apps.jobs.references import dataset_arg_names
from apps.jobs.services import resolve_template, start_spec_run
from apps.labeling import export
from apps.labeling.models import LabelingExport, LabelingProject

TRIGGER = "labeling"


def labels_args(pipeline: Pipeline, dataset_name: str) -> list[tuple[int, str]]:
    """(node index, argument) of every `dataset` argument of the pipeline that names the labels dataset."""
    found = []
    for index, node in enumerate(pipeline.spec.get("nodes") or []):
        if not isinstance(node, dict):
            continue
        template = resolve_template(pipeline.project, str(node.get("template", "")))
        if template is None:
            continue
        for arg in dataset_arg_names(template):
            value = (node.get("args") or {}).get(arg)
            if isinstance(value, str) and value.split("@", 1)[0] == dataset_name:
                found.append((index, arg))
    return found


def set_training_pipeline(labeling: LabelingProject, pipeline_id: int | None, user: Any) -> LabelingProject:
    """Choose (or, with None, clear) the pipeline "train on these labels" starts: one of the same project whose
    dataset argument names the labels dataset."""
    if pipeline_id is None:
        labeling.training_pipeline, labeling.training_by = None, None
    else:
        pipeline = Pipeline.objects.filter(project=labeling.project, pk=pipeline_id).first()
        if pipeline is None:
            raise ValidationError({"pipeline": [_("Choose a pipeline of this project.")]})
        name = export.labels_dataset_name(labeling)
        if not labels_args(pipeline, name):
            raise ValidationError(
                {"pipeline": [_("No dataset argument of “%(pipeline)s” names %(dataset)s (e.g. %(dataset)s@latest).")
                              % {"pipeline": pipeline.name, "dataset": name}]}
            )  # fmt: skip
        labeling.training_pipeline, labeling.training_by = pipeline, user
    labeling.save(update_fields=["training_pipeline", "training_by"])
    return labeling


def train_on_labels(labeling: LabelingProject, user: Any) -> LabelingExport:
    """Export the annotations as a new version and start the training pipeline on it; the export row records the
    run. Nothing annotated, no pipeline chosen, or the pipeline no longer names the labels: ValidationError, and
    nothing is exported."""
    pipeline = labeling.training_pipeline
    if pipeline is None:
        raise ValidationError({"pipeline": [_("Choose a training pipeline first.")]})
    name = export.labels_dataset_name(labeling)
    places = labels_args(pipeline, name)
    if not places:
        raise ValidationError(
            {"pipeline": [_("No dataset argument of “%(pipeline)s” names %(dataset)s any more.")
                          % {"pipeline": pipeline.name, "dataset": name}]}
        )  # fmt: skip
    with transaction.atomic():
        made = export.export_annotations(labeling, user)
        spec = copy.deepcopy(pipeline.spec)
        for index, arg in places:
            spec["nodes"][index]["args"][arg] = made.version.ref
        run = start_spec_run(labeling.project, user, spec, name=pipeline.name, pipeline=pipeline, trigger=TRIGGER)
        made.run = run
        made.save(update_fields=["run"])
    return made
