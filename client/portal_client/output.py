"""How the command line prints objects: a table for people, JSON or YAML for scripts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click
import yaml

from portal_client.models import Model

FORMATS = ("table", "json", "yaml")


def plain(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def emit(value: Any, fmt: str, columns: Iterable[str] | None = None) -> None:
    """Print one object or a list of them."""
    data = plain(value)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, default=str))
        return
    if fmt == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
        return
    if isinstance(value, list) and not value:
        click.echo("Nothing found.", err=True)  # on stderr: a script counting the table's lines counts none
        return
    if isinstance(value, list):
        cols = list(columns or (value[0].columns if value and isinstance(value[0], Model) else []))
        if not cols and value and isinstance(data[0], dict):
            cols = list(data[0])
        table(cols, [[row.get(c) if isinstance(row, dict) else row for c in cols] for row in data])
        return
    if isinstance(data, dict):
        width = max((len(k) for k in data), default=0)
        for key, item in data.items():
            click.echo(f"{key.ljust(width)}  {cell(item) if not isinstance(item, dict | list) else json.dumps(item)}")
        return
    click.echo(str(data))


def table(columns: list[str], rows: list[list[Any]]) -> None:
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(c.upper())] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
