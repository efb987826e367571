"""Write scikit-learn's bundled iris dataset (no download) as data.csv with a header into the output dir."""

from __future__ import annotations

import argparse

from apps.jobs.builtin_tasks._common import fail, flag, log, output_dir, parser, write_csv

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def build_parser() -> argparse.ArgumentParser:
    p = parser("iris_load", __doc__)
    p.add_argument(*flag("label_column"), default="species", help="name of the class column (default: species)")
    p.add_argument(*flag("numeric_labels"), action="store_true", help="write classes as 0/1/2 instead of names")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    label = args.label_column.strip()
    if not label or label in FEATURES:
        return fail(f"--label_column must be a new column name, not {label!r}")
    from sklearn.datasets import load_iris

    iris = load_iris()
    names = [str(name) for name in iris.target_names]
    rows = [
        [*(f"{value:g}" for value in features), target if args.numeric_labels else names[target]]
        for features, target in zip(iris.data.tolist(), iris.target.tolist(), strict=True)
    ]
    path = output_dir() / "data.csv"
    write_csv(path, [*FEATURES, label], rows)
    log(f"wrote {len(rows)} rows, {len(FEATURES)} features, classes {', '.join(names)} to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
