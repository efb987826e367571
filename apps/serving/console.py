"""What the service page's test console is made of: the model's features (one field each), a row of the dataset the
served model was trained on (found through lineage: service → model version → tracking run → dataset version) to
fill them. The page's script (static/js/serving.js) turns the fields into the JSON request and shows it as curl and
Python for a caller outside the portal, with a token placeholder (never a token).

The features come from the model server's metadata (`GET /v2/models/<name>`): the column names of the model's
MLflow signature (`parameters.feature_names`), else one per position of its input's second dimension (`x0`, `x1`…).
The app store's "Try it" form reads them the same way (apps/appstore/tryit.py)."""

from __future__ import annotations

import random
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.datasets.analysis import TABULAR, extension, table_rows
from apps.models.lineage import trained_on
from apps.serving.models import InferenceService

MAX_ROWS = 1000  # a row is drawn from the table's first rows: a big table is not read to its end for one example


def served_version(service: InferenceService) -> Any:
    """The model version the service serves now (its current revision's), else the one it is set to."""
    revision = service.current_revision
    if revision is not None and revision.model_version_id:
        return revision.model_version
    return service.model_version


def features(metadata: dict[str, Any]) -> list[str]:
    """The model's feature names: its signature's columns, else `x<i>` per position of its first input's second
    dimension ([-1, n]); [] when neither says (a text or image input, an llm)."""
    names = (metadata.get("parameters") or {}).get("feature_names")
    if isinstance(names, list) and names:
        return [str(n) for n in names]
    shape = (metadata.get("inputs") or [{}])[0].get("shape") or []
    width = shape[1] if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 0 else 0
    return [f"x{i}" for i in range(width)]


def one_row_input(metadata: dict[str, Any]) -> bool:
    """Whether the model takes one tensor whose rows are its features (the console then shows one field each)."""
    inputs = metadata.get("inputs") or []
    return len(inputs) == 1 and len(inputs[0].get("shape") or []) == 2 and bool(features(metadata))


def row_request(metadata: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    """An Open Inference Protocol v2 request of one row (the console's fields, in the features' order)."""
    spec = (metadata.get("inputs") or [{}])[0]
    return {"inputs": [{"name": spec.get("name") or "input-0", "shape": [1, len(values)],
                        "datatype": spec.get("datatype") or "FP64", "data": values}]}  # fmt: skip


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value else number
    return value


def training_rows(
    service: InferenceService, names: list[str]
) -> tuple[Any, Any, list[str], list[int], list[list[Any]]]:
    """(dataset version, its table file, the table's header, the positions of `names` in it, the table's first
    MAX_ROWS rows) of the table the served model was trained on. Columns are matched by name when the table has
    every feature's column; otherwise (features named by position, `x0`…) the table's first len(names) columns are
    taken, in order. Raises ValidationError keyed by `dataset` with the reason when there is no such table or row."""
    version = served_version(service)
    if version is None:
        raise ValidationError({"dataset": [_("The service serves no registered model version.")]})
    found = trained_on(version.run) if version.run_id else None
    if found is None:
        message = _("Model version %(v)s records no dataset version it was trained on.") % {"v": version.version}
        raise ValidationError({"dataset": [message]})
    files = [f for f in found.files.order_by("path") if extension(f.path) in TABULAR]
    if not files:
        raise ValidationError({"dataset": [_("Dataset version %(ref)s has no table file.") % {"ref": found.ref}]})
    header, rows = table_rows(files[0].path, files[0].blob_id)
    if names and all(name in header for name in names):
        positions = [header.index(name) for name in names]
    else:
        positions = list(range(min(len(names) or len(header), len(header))))
    first: list[list[Any]] = []
    for row in rows:
        first.append(row)
        if len(first) >= MAX_ROWS:
            break
    if not first:
        message = _("%(file)s of %(ref)s has no rows.") % {"file": files[0].path, "ref": found.ref}
        raise ValidationError({"dataset": [message]})
    return found, files[0], header, positions, first


def dataset_row(service: InferenceService, names: list[str], index: int | None = None) -> dict[str, Any]:
    """{"dataset": "name@n", "row": i, "values": [...one per name...]} from the table the served model trained on
    (training_rows says which columns). Raises ValidationError keyed by `dataset` or `index` saying why not."""
    found, file, header, positions, first = training_rows(service, names)
    if index is None:
        index = random.randrange(len(first))  # nosec B311  # an example row, not a secret
    if not 0 <= index < len(first):
        raise ValidationError({"index": [_("Give a row between 0 and %(n)d.") % {"n": len(first) - 1}]})
    row = first[index]
    return {
        "dataset": found.ref,
        "file": file.path,
        "row": index,
        "columns": [header[i] for i in positions],
        "values": [_number(row[i]) if i < len(row) else None for i in positions],
    }
