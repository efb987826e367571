"""Load a dataset version: copy one of its CSV files to data.csv in the output directory.

The portal resolves the `dataset` argument ("iris", "iris@latest", "iris@2") to a read-only local folder
holding that version's files before the task starts; the run records that it read the version.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, log, output_dir, parser, read_csv


def build_parser() -> argparse.ArgumentParser:
    p = parser("dataset_load", __doc__)
    p.add_argument(*flag("dataset"), required=True, help="local folder of the dataset version (given by the portal)")
    p.add_argument(*flag("file"), default="", help="CSV file inside the version (default: its only CSV file)")
    return p


def pick_csv(root: Path, name: str) -> Path:
    if not root.is_dir():
        raise TaskError(f"--dataset: {root} is not a folder")
    if name:
        path = (root / name).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            raise TaskError(f"--file: {name} is not a file of the dataset version")
        return path
    found = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in {".csv", ".tsv"})
    if len(found) != 1:
        listed = ", ".join(str(p.relative_to(root)) for p in found[:10]) or "none"
        raise TaskError(f"the version holds {len(found)} CSV files ({listed}); choose one with --file")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        source = pick_csv(Path(args.dataset), args.file.strip())
        header, rows = read_csv(source)
    except TaskError as exc:
        return fail(str(exc), exc.code)
    target = output_dir() / "data.csv"
    shutil.copyfile(source, target)  # a copy: the version's files are read-only and shared
    log(f"loaded {source.name}: {len(rows)} rows, columns {', '.join(header)} → {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
