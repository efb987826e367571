"""`python -m apps.labeling.convert --config X.xml --input export.json --out DIR --format COCO [--format YOLO]`:
Label Studio's JSON export converted by label-studio-sdk's own converter, each format into DIR/<FORMAT>/.

Runs without Django, in `.venv-labelstudio` (the SDK pins numpy<=2.2, so it is not in the portal's venv:
docs/labeling.md); the portal calls it as a subprocess (`export.py`). Offline: nothing is downloaded
(`download_resources=False`); image sizes come from the annotations (original_width/height).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.labeling.convert")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--format", action="append", required=True, choices=["COCO", "YOLO", "CSV", "JSON_MIN"])
    args = parser.parse_args(argv)

    from label_studio_sdk.converter import Converter

    config = args.config.read_text()
    for name in args.format:
        converter = Converter(config=config, project_dir=None, download_resources=False)
        target = args.out / name
        target.mkdir(parents=True, exist_ok=True)
        if name == "CSV":
            converter.convert(str(args.input), str(target), name, is_dir=False, csv_header=True, csv_separator=",")
        else:
            converter.convert(str(args.input), str(target), name, is_dir=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
