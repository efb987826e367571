"""Run Python source given as `--code` in the task interpreter: output streams, its exit code is the task's."""

from __future__ import annotations

import argparse
import sys

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, parser, run_child


def build_parser() -> argparse.ArgumentParser:
    p = parser("python_script", __doc__)
    p.add_argument(*flag("code"), required=True, help="Python source; runs as __main__ in the output directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.code.strip():
        return fail("--code is empty")
    try:
        compile(args.code, "<code>", "exec")
    except SyntaxError as exc:
        return fail(f"--code is not valid Python: {exc.msg} (line {exc.lineno})")
    try:
        # A child interpreter, unbuffered, so the code cannot disturb this process and its prints stream.
        return run_child([sys.executable, "-u", "-c", args.code])
    except TaskError as exc:
        return fail(str(exc), exc.code)


if __name__ == "__main__":
    raise SystemExit(main())
