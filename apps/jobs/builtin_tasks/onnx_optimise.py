"""Optimise a registered scikit-learn or PyTorch model with ONNX: convert it (skl2onnx, torch.onnx), quantise the graph
(onnxruntime's dynamic INT8, FP16), measure accuracy on held-out rows, latency and size of the original and of each
variant in one table (optimisation.json, MLflow's table format), log it to tracking with a metric per variant and
cell, and register the chosen variant as a new version (flavour onnx) tagged with the version it came from.

Held-out rows: those data-split puts in test.csv with the same test_size, seed and stratification, of a CSV of a dataset
version (--dataset), or an upstream test.csv. Runs in the "train" task environment (onnx, onnxruntime, skl2onnx,
torch: requirements-train.txt). docs/optimisation.md."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import (
    TaskError,
    fail,
    features_and_labels,
    flag,
    input_dirs,
    log,
    model_and_rows_args,
    output_dir,
    parser,
    read_csv,
    resolve_input,
    write_json,
    write_mlmodel,
)

VARIANTS = ("fp32", "int8", "fp16")
CHOICES = ("best", *VARIANTS, "none")
QUANTISE = ("both", "int8", "fp16", "none")
COLUMNS = [
    "variant",
    "format",
    "accuracy",
    "accuracy_drop",
    "agreement",
    "latency_ms",
    "batch_ms",
    "size_bytes",
    "size_ratio",
    "quantised_ops",
    "note",
]
SOURCE_TAG = "portal.optimised_from"  # on the run and on the registered version: models:/name/version of the source
VARIANT_TAG = "portal.optimisation"  # on the registered version: fp32, int8 or fp16
TABLE = "optimisation.json"


def build_parser() -> argparse.ArgumentParser:
    p = parser("onnx_optimise", __doc__)
    model_and_rows_args(p)
    p.add_argument(*flag("test_size"), type=float, default=0.2, help="held-out fraction of the dataset's rows")
    p.add_argument(*flag("seed"), type=int, default=42, help="seed of the held-out split (as data-split's)")
    p.add_argument(*flag("stratify"), action="store_true", help="stratify the split by the label column")
    p.add_argument(*flag("quantise"), choices=QUANTISE, default="both", help="the quantised variants to make")
    p.add_argument(
        *flag("register"),
        choices=CHOICES,
        default="best",
        help="the variant to register: best = the smallest within --max_accuracy_drop",
    )
    p.add_argument(*flag("max_accuracy_drop"), type=float, default=0.01, help="largest accuracy loss 'best' accepts")
    p.add_argument(*flag("name"), default="", help="registered model of the new version (default: the source's)")
    p.add_argument(*flag("alias"), default="", help="alias to move to the new version (default: none)")
    p.add_argument(*flag("latency_runs"), type=int, default=50, help="timed calls per measurement (median)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.test_size < 1:
        return fail(f"--test_size must be between 0 and 1 (exclusive), got {args.test_size:g}")
    if args.stratify and not args.label_column.strip():
        return fail("--stratify needs --label_column (the column whose classes the split keeps in proportion)")
    if not 0 <= args.max_accuracy_drop <= 1 or args.latency_runs < 1:
        return fail("--max_accuracy_drop must be between 0 and 1 and --latency_runs at least 1")
    from apps.jobs.builtin_tasks import _onnx

    if missing := _onnx.missing_packages():
        return fail(f"this task needs {', '.join(missing)}: run it in the train environment (`make train-env`)", 1)
    try:
        reference, registered = model_reference(args.model.strip())
        folder = fetch(reference, registered)
        source = _onnx.load_source(folder)
        header, rows = held_out(args)
        label = label_column(args.label_column.strip(), header, source)
        _names, x, labels = features_and_labels(header, rows, label, source.features)
        table, files = optimise(source, x, labels, args)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    out = output_dir()
    write_json(out / TABLE, {"columns": COLUMNS, "data": [[row[c] for c in COLUMNS] for row in table]})
    print_table(table)
    try:
        chosen = choose(table, args.register, args.max_accuracy_drop)
        if args.register != "none" and chosen is None:
            raise TaskError(
                f"no ONNX variant keeps the accuracy within --max_accuracy_drop {args.max_accuracy_drop:g}", 1
            )
        model_dir = mlflow_folder(out / "mlflow", files[chosen or "fp32"], source, reference, chosen)
        return track(args, table, model_dir, reference, registered, chosen)
    except TaskError as exc:
        return fail(str(exc), exc.code)


# --- what to optimise, on what -----------------------------------------------------------------------------------


def model_reference(given: str) -> tuple[str, dict[str, Any] | None]:
    """(models:/… or a path, the upstream registered.json or None): the given model, else the upstream register's."""
    if given:
        return given, None
    found = [d / "registered.json" for d in input_dirs().values() if (d / "registered.json").is_file()]
    if len(found) != 1:
        raise TaskError("--model: give a registered version (models:/name/3) or put the task after one model-register")
    record = json.loads(found[0].read_text(encoding="utf-8"))
    return f"models:/{record['name']}/{record['version']}", record


def fetch(reference: str, registered: dict[str, Any] | None) -> Path:
    """The model's local folder or file: a registered version is downloaded through the tracking API."""
    if not reference.startswith("models:/"):
        return Path(reference)
    from apps.jobs.builtin_tasks._tracking import Tracking

    tracking = Tracking()
    record = tracking.model_version(reference[len("models:/") :])
    if registered is not None:
        registered.update(record)
    target = output_dir() / "source"
    log(f"downloading {reference} (version {record['version']}) from the registry")
    tracking.download(record["source"], target)
    return target


def held_out(args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """The header and the held-out rows: data-split's test rows of the dataset's CSV, or an upstream test.csv."""
    if not args.dataset.strip():
        path = resolve_input("", "test.csv", "--dataset (none given, and upstream test.csv)")
        header, rows = read_csv(path)
        log(f"measuring on {len(rows)} rows of {path}")
        return header, rows
    from apps.jobs.builtin_tasks.dataset_load import pick_csv
    from apps.jobs.builtin_tasks.split import split_rows

    path = pick_csv(Path(args.dataset), args.file.strip())
    header, rows = read_csv(path)
    stratify = args.label_column.strip() if args.stratify else ""
    _train, test = split_rows(header, rows, args.test_size, args.seed, stratify)
    log(f"measuring on the {len(test)} held-out rows of {path.name} (test_size={args.test_size:g}, seed={args.seed})")
    return header, test


def label_column(given: str, header: list[str], source: Any) -> str:
    if given:
        return given
    others = [name for name in header if name not in (source.features or [])]
    if source.features and len(others) == 1:
        return others[0]
    raise TaskError("--label_column: the model does not name its feature columns; say which column is the class")


# --- measuring ---------------------------------------------------------------------------------------------------


def optimise(source: Any, x: list[list[float]], labels: list[str], args: argparse.Namespace):
    """(one table row per model: the original, then each ONNX variant made; the variants' files by name)."""
    import numpy as np

    from apps.jobs.builtin_tasks import _onnx

    features = np.asarray(x, dtype=np.float64)
    one = features[:1]
    if source.flavour == "sklearn":
        original = source.model.predict
        expected = [str(v) for v in original(features)]
    else:
        import torch

        torch.set_num_threads(1)

        def original(rows: Any) -> Any:
            return _onnx.torch_outputs(source, rows)

        expected = class_names(_onnx.classes_of(original(features)), source, labels)
    size = source.file.stat().st_size
    base = measure("original", source.flavour, expected, labels, expected, original, features, one, size, args)
    table, files = [base], {}
    work = output_dir() / "variants"
    work.mkdir(exist_ok=True)
    files["fp32"] = work / "model.fp32.onnx"
    log(f"converting the {source.flavour} model to ONNX")
    _onnx.convert(source, features, files["fp32"])
    makers = {
        "int8": (args.quantise in ("both", "int8"), _onnx.quantise_int8),
        "fp16": (args.quantise in ("both", "fp16"), _onnx.convert_fp16),
    }
    for variant in VARIANTS:
        if variant != "fp32":
            wanted, make = makers[variant]
            if not wanted:
                continue
            files[variant] = work / f"model.{variant}.onnx"
        try:
            if variant != "fp32":
                make(files["fp32"], files[variant])
            model = _onnx.OnnxModel(files[variant])

            def run(rows: Any, model: Any = model) -> Any:
                return model.outputs(rows, source)

            answered = run(features)
        except Exception as exc:  # an operator the quantiser refuses, a graph onnxruntime then rejects
            if variant == "fp32":
                raise
            # (the FP16 graph of a k-nearest-neighbours pipeline, e.g.: its Scan mixes float16 and float32)
            log(f"warning: no {variant} variant: {type(exc).__name__}: {exc}")
            table.append(
                {
                    **dict.fromkeys(COLUMNS),
                    "variant": variant,
                    "format": "onnx",
                    "note": f"failed: {type(exc).__name__}: {exc}"[:200],
                }
            )
            del files[variant]
            continue
        if source.flavour == "sklearn":
            predicted = [str(v) for v in answered["predict"]]
        else:
            predicted = class_names(_onnx.classes_of(answered), source, labels)
        row = measure(
            variant, "onnx", predicted, labels, expected, run, features, one, files[variant].stat().st_size, args, base
        )
        row["quantised_ops"] = _onnx.quantised_operators(files[variant]) if variant == "int8" else None
        if variant == "int8" and not row["quantised_ops"]:
            row["note"] = "no quantisable operator (MatMul, Gemm, Conv): weights unchanged"
        table.append(row)
    return table, files


def class_names(indices: Any, source: Any, labels: list[str]) -> list[str]:
    """A PyTorch classifier's class indices as the label column's values: by the MLmodel's `classes` when it lists
    them, as numbers when the labels are numbers, else by the sorted distinct labels (scikit-learn's order)."""
    values = [int(i) for i in indices]
    if source.classes:
        return [str(source.classes[i]) if 0 <= i < len(source.classes) else str(i) for i in values]
    if all(label.lstrip("-").isdigit() for label in labels):
        return [str(i) for i in values]
    names = sorted(set(labels))
    return [names[i] if 0 <= i < len(names) else str(i) for i in values]


def measure(
    variant: str,
    fmt: str,
    predicted: list[str],
    labels: list[str],
    expected: list[str],
    run: Any,
    features: Any,
    one: Any,
    size: int,
    args: argparse.Namespace,
    base: dict | None = None,
) -> dict[str, Any]:
    """One row of the table: accuracy on the held-out labels, agreement with the original's predictions, the median
    latency of one row and of all rows, the size and its ratio to the original's."""
    from apps.jobs.builtin_tasks import _onnx

    accuracy = sum(p == t for p, t in zip(predicted, labels, strict=True)) / len(labels)
    row = {
        "variant": variant,
        "format": fmt,
        "accuracy": round(accuracy, 6),
        "agreement": round(sum(p == e for p, e in zip(predicted, expected, strict=True)) / len(labels), 6),
        "latency_ms": round(_onnx.median_ms(run, one, args.latency_runs), 4),
        "batch_ms": round(_onnx.median_ms(run, features, max(1, args.latency_runs // 5)), 4),
        "size_bytes": size,
        "quantised_ops": None,
        "note": "",
        "rows": len(labels),
    }
    reference = base or row
    row["accuracy_drop"] = round(reference["accuracy"] - row["accuracy"], 6)
    row["size_ratio"] = round(size / reference["size_bytes"], 4) if reference["size_bytes"] else None
    return row


def choose(table: list[dict[str, Any]], wanted: str, max_drop: float) -> str | None:
    """The variant to register: the one asked for (if it was made), or the smallest ONNX one (then the fastest)
    whose accuracy drop is within `max_drop`."""
    made = [row for row in table if row["format"] == "onnx" and row["accuracy"] is not None]
    if wanted == "none":
        return None
    if wanted != "best":
        if not any(row["variant"] == wanted for row in made):
            raise TaskError(f"--register {wanted}: that variant was not made", 1)
        return wanted
    fit = [row for row in made if row["accuracy_drop"] <= max_drop + 1e-12]
    if not fit:
        return None
    return min(fit, key=lambda row: (row["size_bytes"], row["latency_ms"]))["variant"]


PRINTED = ("variant", "accuracy", "accuracy_drop", "agreement", "latency_ms", "batch_ms", "size_bytes", "size_ratio")


def print_table(table: list[dict[str, Any]]) -> None:
    """The table in the log, as Markdown (a failed or unquantised variant's note after its row)."""
    log("| variant | accuracy | drop | agreement | latency (ms, 1 row) | batch (ms) | size (bytes) | size ratio |")
    log("|---|---|---|---|---|---|---|---|")
    for row in table:
        cells = " | ".join("-" if row[c] is None else str(row[c]) for c in PRINTED)
        log(f"| {cells} |" + (f" {row['note']}" if row["note"] else ""))


# --- the new version ---------------------------------------------------------------------------------------------


def mlflow_folder(root: Path, onnx_file: Path, source: Any, reference: str, variant: str | None) -> Path:
    """The chosen variant as an MLflow Model folder of flavour onnx (MLmodel as JSON, model.onnx), with the source's
    signature and metadata, so the model server names the same features and Try it asks for the same input."""
    import shutil

    import onnx
    import onnxruntime

    folder = root / "model"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx_file, folder / "model.onnx")
    metadata = {
        **source.metadata,
        "optimisation": {"source": reference, "variant": variant or "fp32", "from_flavour": source.flavour},
    }
    flavors = {
        "python_function": {"loader_module": "mlflow.onnx", "data": "model.onnx"},
        "onnx": {
            "onnx_version": onnx.__version__,
            "data": "model.onnx",
            "providers": ["CPUExecutionProvider"],
            "code": None,
        },
    }
    fields: dict[str, Any] = {"metadata": metadata}
    if source.features:  # the graph takes float32 columns, whatever type the original's signature gave them
        columns = [{"type": "float", "name": name, "required": True} for name in source.features]
        fields["signature"] = {"inputs": json.dumps(columns), "outputs": None}
    elif source.signature:  # a tensor signature (PyTorch): the same name, dtype and shape
        fields["signature"] = source.signature
    requirements = f"onnxruntime=={onnxruntime.__version__}\nonnx=={onnx.__version__}\n"
    write_mlmodel(folder, flavors, requirements, **fields)
    return folder


def metrics_of(table: list[dict[str, Any]]) -> dict[str, float]:
    """One metric per variant and measure: accuracy_int8, latency_ms_original, size_bytes_fp16, …"""
    keys = ("accuracy", "accuracy_drop", "agreement", "latency_ms", "batch_ms", "size_bytes", "size_ratio")
    return {f"{key}_{row['variant']}": float(row[key]) for row in table for key in keys if row.get(key) is not None}


def track(
    args: argparse.Namespace,
    table: list[dict[str, Any]],
    model_dir: Path,
    reference: str,
    registered: dict[str, Any] | None,
    chosen: str | None,
) -> int:
    """Log the table (artifact + metrics) and the model to a new tracking run, then register the chosen variant as
    a new version tagged with its source. Without MLFLOW_TRACKING_URI: the files only (nothing to register to)."""
    out = output_dir()
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        log("tracking skipped: MLFLOW_TRACKING_URI is not set; nothing registered")
        return 0
    from apps.jobs.builtin_tasks._tracking import Tracking, tracked_model

    tracking = Tracking()
    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
    run_name = (
        "-".join(
            filter(
                None,
                [os.environ.get("PORTAL_PIPELINE"), os.environ.get("PORTAL_RUN_ID"), os.environ.get("PORTAL_TASK")],
            )
        )
        or None
    )
    tags = {
        "portal.task": os.environ.get("PORTAL_TASK", ""),
        SOURCE_TAG: reference,
        "mlflow.loggedArtifacts": json.dumps([{"path": TABLE, "type": "table"}]),
    }
    info = tracking.start_run(experiment, run_name, tags)
    params = {
        "source": reference,
        "from_flavour": table[0]["format"],
        "heldout_rows": table[0]["rows"],
        "variants": ",".join(row["variant"] for row in table[1:]),
        "registered_variant": chosen or "none",
    }
    tracking.log_batch(info["run_id"], params=params, metrics=metrics_of(table))
    tracking.upload(info["artifact_uri"], out / TABLE, TABLE)
    tracking.upload(info["artifact_uri"], model_dir, "model")
    tracking.end_run(info["run_id"])
    record = tracked_model(info, experiment)
    write_json(out / "tracking.json", record)
    log(f"logged the table ({TABLE}) and {len(metrics_of(table))} metrics to run {info['run_id']}")
    if chosen is None:
        return 0
    name = args.name.strip() or source_name(reference)
    if not name:
        raise TaskError("--name: the source is not a registered version; say which registered model to add to")
    source_version = ""
    if reference.startswith("models:/"):
        found = registered or tracking.model_version(reference[len("models:/") :])
        source_version = f"{found.get('name') or source_name(reference)}/{found['version']}"
    row = next(r for r in table if r["variant"] == chosen)
    description = (
        f"ONNX {chosen} of {reference}: accuracy {row['accuracy']:.4f} (drop {row['accuracy_drop']:+.4f}), "
        f"{row['latency_ms']:.3f} ms per row, {row['size_bytes']} bytes."
    )
    version_tags = {VARIANT_TAG: chosen, **({SOURCE_TAG: source_version} if source_version else {})}
    version = tracking.register(name, record["model_source"], info["run_id"], description, tags=version_tags)
    if args.alias.strip():
        tracking.set_alias(name, args.alias.strip().lower(), version["version"])
    write_json(
        out / "registered.json",
        {
            "name": name,
            "version": version["version"],
            "alias": args.alias.strip(),
            "run_id": info["run_id"],
            "variant": chosen,
        },
    )
    log(f"registered {name} version {version['version']} (onnx, {chosen}) from {reference}")
    return 0


def source_name(reference: str) -> str:
    if not reference.startswith("models:/"):
        return ""
    ref = reference[len("models:/") :]
    return ref.rsplit("@", 1)[0] if "@" in ref else ref.rsplit("/", 1)[0]


if __name__ == "__main__":
    raise SystemExit(main())
