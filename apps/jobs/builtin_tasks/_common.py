"""Helpers the built-in task scripts share: the portal's env contract, CSV files, child processes, JSON over HTTP.

Standard library only, and no Django: these run inside task environments, not the portal.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

INPUT_PREFIX = "PORTAL_INPUT_"


class TaskError(Exception):
    """A problem to report in one line and exit with `code` (2: bad input, 1: the work failed)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class HttpError(TaskError):
    """A JSON-over-HTTP call that failed: `status` is 0 when no answer came; `error` is the answer's JSON object
    (or {}), `detail` its text (at most 2,000 bytes), `reason` the message without the request."""

    def __init__(
        self, request: str, reason: str, status: int = 0, error: dict[str, Any] | None = None, detail: str = ""
    ) -> None:
        super().__init__(f"{request}: {reason}", code=1)
        self.reason = reason
        self.status = status
        self.error = error or {}
        self.detail = detail


def call_json(
    method: str,
    url: str,
    *,
    token: str = "",
    data: bytes | None = None,
    content_type: str = "application/json",
    timeout: float = 15,
) -> Any:
    """One request to the portal's own APIs (REST or MLflow) as the task's bearer token; the decoded JSON answer
    ({} when empty). The one transport of the built-in tasks: standard library only, no retries (a task must never
    hang on the portal for minutes)."""
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # nosec B310 (the portal's own API)
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace").strip()
        try:
            error = json.loads(detail)
        except ValueError:
            error = {}
        error = error if isinstance(error, dict) else {}
        raise HttpError(f"{method} {url}", f"HTTP {exc.code}: {detail}", exc.code, error, detail) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise HttpError(f"{method} {url}", str(getattr(exc, "reason", exc))) from None
    return json.loads(raw) if raw else {}


def log(message: str) -> None:
    """A progress line; flushed so the runtime streams it even when stdout is a pipe."""
    print(message, flush=True)


def fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)


def flag(name: str) -> list[str]:
    """Both spellings of an option: the template passes `--test_size`, a person may type `--test-size`."""
    dashed = "--" + name.replace("_", "-")
    underscored = "--" + name
    return [underscored] if dashed == underscored else [underscored, dashed]


def output_dir() -> Path:
    """PORTAL_OUTPUT_DIR, else the working directory (the runtime starts the process there too)."""
    path = Path(os.environ.get("PORTAL_OUTPUT_DIR") or os.getcwd())
    path.mkdir(parents=True, exist_ok=True)
    return path


def input_dirs() -> dict[str, Path]:
    """{upstream node env name: its output dir} from PORTAL_INPUT_*, sorted by name."""
    return {
        key[len(INPUT_PREFIX) :]: Path(value)
        for key, value in sorted(os.environ.items())
        if key.startswith(INPUT_PREFIX) and value
    }


def resolve_input(explicit: str | None, filename: str, what: str) -> Path:
    """The file to read: `explicit` (a file, or a directory holding `filename`), else the one upstream
    output directory that holds `filename`."""
    if explicit:
        path = Path(explicit)
        if path.is_dir():
            path = path / filename
        if not path.is_file():
            raise TaskError(f"{what}: {path} does not exist")
        return path
    dirs = input_dirs()
    if not dirs:
        raise TaskError(f"{what}: no upstream input (PORTAL_INPUT_* is not set); pass the path explicitly")
    found = [d / filename for d in dirs.values() if (d / filename).is_file()]
    if not found:
        names = ", ".join(f"{INPUT_PREFIX}{name}" for name in dirs)
        raise TaskError(f"{what}: no {filename} in the upstream outputs ({names})")
    if len(found) > 1:
        raise TaskError(f"{what}: {filename} is in several upstream outputs ({', '.join(map(str, found))}); pick one")
    return found[0]


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, rows); every row as long as the header."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                raise TaskError(f"{path}: empty file, expected a CSV header")
            rows = []
            for number, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise TaskError(f"{path}, line {number}: {len(row)} fields, the header has {len(header)}")
                rows.append(row)
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not a UTF-8 text file") from None
    except csv.Error as exc:
        raise TaskError(f"{path}: not a valid CSV file: {exc}") from None
    return header, rows


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def features_and_labels(
    header: list[str], rows: list[list[str]], label_column: str, features: list[str] | None = None
) -> tuple[list[str], list[list[float]], list[str]]:
    """(feature names, numeric feature rows, labels). `features` picks and orders columns by name."""
    if label_column not in header:
        raise TaskError(f"label column {label_column!r} is not in the CSV header ({', '.join(header)})")
    names = features if features is not None else [name for name in header if name != label_column]
    missing = [name for name in names if name not in header]
    if missing:
        raise TaskError(f"feature columns missing from the CSV: {', '.join(missing)}")
    if not names:
        raise TaskError("no feature columns besides the label")
    if not rows:
        raise TaskError("the CSV has a header but no rows")
    positions = [header.index(name) for name in names]
    label_at = header.index(label_column)
    matrix = []
    for number, row in enumerate(rows, start=2):
        try:
            matrix.append([float(row[i]) for i in positions])
        except ValueError:
            bad = next(names[j] for j, i in enumerate(positions) if not _is_float(row[i]))
            raise TaskError(f"line {number}: column {bad!r} is not a number: {row[header.index(bad)]!r}") from None
    return names, matrix, [row[label_at] for row in rows]


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def model_and_rows_args(p: argparse.ArgumentParser) -> None:
    """The arguments of a task that reads a registered model and rows to try it on (explain, onnx-optimise)."""
    p.add_argument(
        *flag("model"),
        default="",
        help="models:/name/3, models:/name@alias, or a model file or folder (default: the version the "
        "upstream model-register node registered)",
    )
    p.add_argument(*flag("dataset"), default="", help="local folder of a dataset version (default: upstream test.csv)")
    p.add_argument(*flag("file"), default="", help="the CSV file inside the dataset version (default: its only one)")
    p.add_argument(*flag("label_column"), default="", help="the class column (default: the one non-feature column)")


def write_mlmodel(folder: Path, flavors: dict[str, dict[str, Any]], requirements: str, **fields: Any) -> None:
    """An MLflow Model folder's description: MLmodel (as JSON, which is valid YAML) with `flavors` (its
    `python_function` completed with this Python's version and the env file), `fields` (signature, metadata…), a
    fresh uuid and time; the python_env.yaml it points at; and requirements.txt."""
    import platform
    import uuid
    from datetime import UTC, datetime

    (folder / "requirements.txt").write_text(requirements)
    pyfunc = {**flavors["python_function"], "python_version": platform.python_version()}
    pyfunc["env"] = {"virtualenv": "python_env.yaml"}
    mlmodel = {
        "artifact_path": "model",
        "flavors": {**flavors, "python_function": pyfunc},
        **fields,
        "model_uuid": uuid.uuid4().hex,
        "utc_time_created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
    }
    (folder / "MLmodel").write_text(json.dumps(mlmodel, indent=2) + "\n")
    python_env = {
        "python": platform.python_version(),
        "build_dependencies": ["pip"],
        "dependencies": ["-r requirements.txt"],
    }
    (folder / "python_env.yaml").write_text(json.dumps(python_env) + "\n")


def run_child(argv: list[str]) -> int:
    """Run a child with our stdout/stderr (so its output streams as it comes) and return its exit code.

    SIGTERM/SIGINT sent to this process alone are passed on, so cancelling never orphans the child.
    A child killed by signal N reports 128+N, as a shell does.
    """
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        raise TaskError(f"cannot start {argv[0]}: {exc}", code=1) from None

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
