"""Run a shell script with `/bin/sh -e`: output streams as it comes, the script's exit code is the task's."""

from __future__ import annotations

import argparse

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, parser, run_child

SHELL = "/bin/sh"


def build_parser() -> argparse.ArgumentParser:
    p = parser("shell", __doc__)
    p.add_argument(*flag("script"), required=True, help="the script; runs in the output directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.script.strip():
        return fail("--script is empty")
    try:
        return run_child([SHELL, "-e", "-c", args.script])
    except TaskError as exc:
        return fail(str(exc), exc.code)


if __name__ == "__main__":
    raise SystemExit(main())
