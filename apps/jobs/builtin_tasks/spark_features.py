"""Feature engineering with PySpark: read a dataset version's CSV, add derived columns (Spark SQL expressions),
standardise numeric columns, one-hot encode categorical ones, keep the selected columns, and write the result as
data.csv in the output directory; with --output_dataset, also publish it as that dataset's next version (over the
portal's API, with the task's lineage). The steps run in that order, so --select may name derived and one-hot columns.

Locally Spark runs in this process's JVM (`local[N]`, --master; Java 17 or 21 must be installed); on Kubernetes the
template is a SparkApplication (spark-operator) whose spark-submit chooses the master, and --master is ignored.
Runs in the "train" task environment (pyspark: requirements-train.txt). docs/spark.md."""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, log, output_dir, parser, run_child

MASTER = re.compile(r"^local(\[(\*|[1-9][0-9]*)\])?$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OUTPUT_FILE = "data.csv"
MAX_CATEGORIES = 100  # one-hot columns per encoded column at most: a typo'd id column would explode the width


def build_parser() -> argparse.ArgumentParser:
    p = parser("spark_features", __doc__)
    p.add_argument(*flag("dataset"), required=True, help="local folder of the dataset version (given by the portal)")
    p.add_argument(*flag("file"), default="", help="the CSV file inside the version (default: its only one)")
    p.add_argument(
        *flag("derive"),
        default="",
        help="new columns, one 'name = Spark SQL expression' per line or separated by ';' "
        "(e.g. 'petal_ratio = petal_length / petal_width')",
    )
    p.add_argument(*flag("standardize"), default="", help="numeric columns replaced by (x - mean) / stddev, by commas")
    p.add_argument(*flag("one_hot"), default="", help="columns replaced by one 0/1 column per value, by commas")
    p.add_argument(*flag("select"), default="", help="the columns written, in order, by commas (default: all)")
    p.add_argument(*flag("output_dataset"), default="", help="publish data.csv as this dataset's next version")
    p.add_argument(*flag("message"), default="", help="the published version's message")
    p.add_argument(*flag("master"), default="local[2]", help="Spark master when run locally: local, local[N], local[*]")
    return p


def columns(text: str, what: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise TaskError(f"--{what}: {', '.join(duplicates)} named twice")
    return names


def derivations(text: str) -> list[tuple[str, str]]:
    """[(name, expression)] from 'name = expression' lines (or ';'-separated); names are SQL identifiers."""
    found: list[tuple[str, str]] = []
    for part in re.split(r"[;\n]", text):
        if not part.strip():
            continue
        name, equals, expression = part.partition("=")
        name, expression = name.strip(), expression.strip()
        if not equals or not expression:
            raise TaskError(f"--derive: {part.strip()!r} is not 'name = expression'")
        if not NAME.match(name):
            raise TaskError(f"--derive: {name!r} is not a column name (letters, digits and _, not first a digit)")
        if name in (n for n, _ in found):
            raise TaskError(f"--derive: {name} is derived twice")
        found.append((name, expression))
    return found


def plan(args: argparse.Namespace, header: list[str]) -> dict[str, Any]:
    """The steps, checked against the CSV's header before Spark starts (a bad argument fails in a second)."""
    if not MASTER.match(args.master.strip()):
        raise TaskError(f"--master: {args.master!r} is not local, local[N] or local[*]")
    derive = derivations(args.derive)
    known = list(header) + [name for name, _ in derive if name not in header]
    standardize = columns(args.standardize, "standardize")
    one_hot = columns(args.one_hot, "one_hot")
    for option, names in (("standardize", standardize), ("one_hot", one_hot)):
        missing = [name for name in names if name not in known]
        if missing:
            raise TaskError(f"--{option}: no column {', '.join(missing)} (columns: {', '.join(known)})")
    both = sorted(set(standardize) & set(one_hot))
    if both:
        raise TaskError(f"--standardize and --one_hot both name {', '.join(both)}")
    if args.output_dataset.strip() and not NAME.match(args.output_dataset.strip().replace("-", "_")):
        raise TaskError(f"--output_dataset: {args.output_dataset!r} is not a dataset name")
    return {"derive": derive, "standardize": standardize, "one_hot": one_hot, "select": columns(args.select, "select")}


def read_header(path: Path) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), None)
    except UnicodeDecodeError:
        raise TaskError(f"{path.name}: not a UTF-8 text file") from None
    if not header:
        raise TaskError(f"{path.name}: empty file, expected a CSV header")
    return header


def ui_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The Spark UI's settings when run locally: on the port the portal chose (PORTAL_SPARK_UI_PORT, forwarded into
    the sandbox) with its links under the portal's proxy (PORTAL_SPARK_UI_BASE), read-only; without a port, no UI."""
    port = env.get("PORTAL_SPARK_UI_PORT", "").strip()
    if not port.isdigit():
        return {"spark.ui.enabled": "false"}
    settings = {"spark.ui.enabled": "true", "spark.ui.port": port, "spark.ui.killEnabled": "false"}
    if env.get("PORTAL_SPARK_UI_BASE"):
        settings["spark.ui.proxyBase"] = env["PORTAL_SPARK_UI_BASE"]
    return settings


def session(master: str) -> Any:
    """A SparkSession: local[N] on 127.0.0.1 with the UI only where the portal proxies it (ui_settings), or (under
    spark-submit, as in a SparkApplication's driver) whatever spark-submit was told."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise TaskError("Spark needs Java 17 or 21 and none is installed (no java on PATH, no JAVA_HOME)", code=1)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise TaskError("pyspark is not installed in this task environment: run `make train-env`", code=1) from None
    builder = SparkSession.builder.appName(os.environ.get("PORTAL_TASK") or "spark-features")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit: run in this process's JVM
        # No host name lookups: the local sandbox's network namespace has loopback only, and its own host name.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")
        builder = (
            builder.master(master)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
        )
        for key, value in ui_settings(os.environ).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def transform(spark: Any, path: Path, steps: dict[str, Any]) -> Any:
    """The engineered DataFrame. A Spark error in an expression or a type is a TaskError naming the option."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    frame = spark.read.csv(str(path), header=True, inferSchema=True)
    for name, expression in steps["derive"]:
        try:
            frame = frame.withColumn(name, F.expr(expression))
            _ = frame.schema  # analyses the plan now, so an unknown column fails here, naming the derivation
        except PySparkException as exc:
            raise TaskError(f"--derive {name}: {first_line(exc)}") from None
    numeric = {"double", "float", "integer", "long", "short", "byte", "decimal"}
    types = {field.name: field.dataType.typeName() for field in frame.schema.fields}
    for name in steps["standardize"]:
        if types[name] not in numeric:
            raise TaskError(f"--standardize: {name} is not numeric (it is {types[name]})")
    if steps["standardize"]:
        aggregates = [F.mean(n).alias(f"m{i}") for i, n in enumerate(steps["standardize"])]
        aggregates += [F.stddev_samp(n).alias(f"s{i}") for i, n in enumerate(steps["standardize"])]
        stats = frame.agg(*aggregates).first()
        for i, name in enumerate(steps["standardize"]):
            mean, std = stats[f"m{i}"], stats[f"s{i}"]
            if not std:
                raise TaskError(f"--standardize: {name} has no spread (standard deviation {std}); leave it out")
            frame = frame.withColumn(name, (F.col(name) - F.lit(mean)) / F.lit(std))
            log(f"standardised {name}: mean {mean:.6g}, standard deviation {std:.6g}")
    for name in steps["one_hot"]:
        values = sorted(row[0] for row in frame.select(name).distinct().limit(MAX_CATEGORIES + 1).collect())
        if len(values) > MAX_CATEGORIES:
            raise TaskError(f"--one_hot: {name} has more than {MAX_CATEGORIES} distinct values")
        position = frame.columns.index(name)
        encoded = [(f"{name}_{slug(value)}", value) for value in values]
        taken = [new for new, _ in encoded if new in frame.columns]
        if taken or len({new for new, _ in encoded}) != len(encoded):
            raise TaskError(f"--one_hot: {name}'s values make column names that clash: {', '.join(taken) or name}")
        ones = [F.when(F.col(name) == F.lit(value), 1).otherwise(0).alias(new) for new, value in encoded]
        rest = [F.col(c) for c in frame.columns]
        frame = frame.select(*rest[:position], *ones, *rest[position + 1 :])
        log(f"one-hot {name}: {', '.join(new for new, _ in encoded)}")
    if steps["select"]:
        missing = [name for name in steps["select"] if name not in frame.columns]
        if missing:
            raise TaskError(f"--select: no column {', '.join(missing)} (columns: {', '.join(frame.columns)})")
        frame = frame.select(*steps["select"])
    return frame


def slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9_]+", "_", str(value)).strip("_")
    return text or "empty"


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def write(frame: Any, target: Path) -> int:
    """One CSV file with a header (Spark writes a folder of part files: coalesce to one and move it)."""
    scratch = Path(tempfile.mkdtemp(prefix="spark-out-", dir=target.parent))
    try:
        frame.coalesce(1).write.mode("overwrite").csv(str(scratch / "csv"), header=True)
        parts = sorted((scratch / "csv").glob("part-*.csv"))
        if len(parts) != 1:
            raise TaskError(f"Spark wrote {len(parts)} part files, expected one", code=1)
        shutil.move(str(parts[0]), target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with target.open(encoding="utf-8") as fh:
        return max(sum(1 for _ in fh) - 1, 0)


def publish(target: Path, dataset: str, message: str) -> None:
    """data.csv as `dataset`'s next version (created if missing), over the API with the task's token: the standard
    library client `python -m apps.datasets.publish` in a child (task scripts import nothing of the portal's apps)."""
    missing = [k for k in ("PORTAL_API_URL", "PORTAL_API_TOKEN", "PORTAL_PROJECT") if not os.environ.get(k)]
    if missing:
        raise TaskError(f"--output_dataset: {', '.join(missing)} must be set (the portal sets them for every task)")
    with tempfile.TemporaryDirectory(prefix="spark-publish-") as folder:
        shutil.copyfile(target, Path(folder) / target.name)
        argv = [sys.executable, "-m", "apps.datasets.publish", dataset, folder, "--message", message, "--create"]
        if run_child(argv) != 0:
            raise TaskError(f"--output_dataset {dataset}: could not publish the new version", code=1)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from apps.jobs.builtin_tasks.dataset_load import pick_csv

    try:
        source = pick_csv(Path(args.dataset), args.file.strip())
        steps = plan(args, read_header(source))
        spark = session(args.master.strip())
        try:
            # What the Spark UI lists each step's jobs as (the portal shows it while the task runs: docs/spark.md).
            spark.sparkContext.setJobDescription(f"spark-features: read {source.name}")
            frame = transform(spark, source, steps)
            target = output_dir() / OUTPUT_FILE
            spark.sparkContext.setJobDescription(f"spark-features: write {OUTPUT_FILE}")
            rows = write(frame, target)
            written = frame.columns
        finally:
            spark.stop()
        log(f"wrote {OUTPUT_FILE}: {rows} rows, columns {', '.join(written)}")
        if args.output_dataset.strip():
            message = args.message.strip() or f"spark-features of {source.name}"
            publish(target, args.output_dataset.strip(), message)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
