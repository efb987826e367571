"""Split a CSV into train.csv and test.csv (optionally stratified by a label column)."""

from __future__ import annotations

import argparse
from collections import Counter

from apps.jobs.builtin_tasks._common import (
    TaskError,
    fail,
    flag,
    log,
    output_dir,
    parser,
    read_csv,
    resolve_input,
    write_csv,
)


def build_parser() -> argparse.ArgumentParser:
    p = parser("split", __doc__)
    p.add_argument(*flag("input"), default="", help="CSV file or a directory with data.csv (default: upstream)")
    p.add_argument(*flag("test_size"), type=float, default=0.2, help="fraction of rows for test.csv, 0 < x < 1")
    p.add_argument(*flag("seed"), type=int, default=42, help="random seed")
    p.add_argument(*flag("label_column"), default="", help="stratify by this column (default: no stratification)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.test_size < 1:
        return fail(f"--test_size must be between 0 and 1 (exclusive), got {args.test_size:g}")
    try:
        path = resolve_input(args.input, "data.csv", "input")
        header, rows = read_csv(path)
        train, test = split_rows(header, rows, args.test_size, args.seed, args.label_column.strip())
    except TaskError as exc:
        return fail(str(exc), exc.code)
    out = output_dir()
    write_csv(out / "train.csv", header, train)
    write_csv(out / "test.csv", header, test)
    log(f"read {len(rows)} rows from {path}")
    log(f"train.csv: {len(train)} rows, test.csv: {len(test)} rows (test_size={args.test_size:g}, seed={args.seed})")
    return 0


def split_rows(
    header: list[str], rows: list[list[str]], test_size: float, seed: int, label_column: str
) -> tuple[list[list[str]], list[list[str]]]:
    from sklearn.model_selection import train_test_split

    if len(rows) < 2:
        raise TaskError(f"need at least 2 rows to split, the input has {len(rows)}")
    stratify = None
    if label_column:
        if label_column not in header:
            raise TaskError(f"label column {label_column!r} is not in the header ({', '.join(header)})")
        stratify = [row[header.index(label_column)] for row in rows]
        rare = sorted(label for label, count in Counter(stratify).items() if count < 2)
        if rare:
            raise TaskError(f"cannot stratify: classes with a single row: {', '.join(rare[:5])}")
        log(f"stratifying by {label_column!r} ({len(set(stratify))} classes)")
    try:
        train_idx, test_idx = train_test_split(
            list(range(len(rows))), test_size=test_size, random_state=seed, stratify=stratify
        )
    except ValueError as exc:  # e.g. fewer test rows than classes
        raise TaskError(f"cannot split: {exc}") from None
    return [rows[i] for i in train_idx], [rows[i] for i in test_idx]


if __name__ == "__main__":
    raise SystemExit(main())
