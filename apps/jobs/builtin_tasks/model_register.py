"""Register the model an upstream training node tracked (its tracking.json) as a new version of a
registered model, wait until the version is READY, and point an alias (e.g. "staging") at it."""

from __future__ import annotations

import argparse
import json

from apps.jobs.builtin_tasks._common import TaskError, fail, flag, log, output_dir, parser, resolve_input, write_json

ALIAS_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def build_parser() -> argparse.ArgumentParser:
    p = parser("model_register", __doc__)
    p.add_argument(*flag("name"), required=True, help="registered model name (created when new)")
    p.add_argument(*flag("alias"), default="staging", help="alias to move to the new version; empty: none")
    p.add_argument(
        *flag("description"),
        default="",
        help="description of the new version (default: the card the training wrote, if any)",
    )
    p.add_argument(*flag("input"), default="", help="tracking.json or its folder (default: the upstream one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name, alias = args.name.strip(), args.alias.strip().lower()
    if not name:
        return fail("--name must not be empty")
    if alias and (not set(alias) <= ALIAS_CHARS or (alias.startswith("v") and alias[1:].isdigit())):
        return fail(f"--alias {alias!r}: use letters, digits, '_' or '-', and not v<number> (that names a version)")
    from apps.jobs.builtin_tasks._tracking import Tracking

    try:
        path = resolve_input(args.input, "tracking.json", "input")
        try:
            tracked = json.loads(path.read_text())
            run_id, source = tracked["run_id"], tracked["model_source"]
        except (ValueError, KeyError) as exc:
            raise TaskError(f"{path} is not a tracking record of a training run ({exc})") from None
        tracking = Tracking()
        # the training's own card (the LoRA fine-tune writes one) unless a description is given
        description = args.description or str(tracked.get("description") or "")
        version = tracking.register(name, source, run_id, description)
        if alias:
            tracking.set_alias(name, alias, version["version"])
    except TaskError as exc:
        return fail(str(exc), exc.code)
    write_json(
        output_dir() / "registered.json",
        {"name": name, "version": version["version"], "alias": alias, "run_id": run_id},
    )
    where = f" and moved alias {alias!r} to it" if alias else ""
    log(f"registered {name} version {version['version']} from run {run_id}{where}")
    log(f"load it with mlflow.pyfunc.load_model('models:/{name}/{version['version']}')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
