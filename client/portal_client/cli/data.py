"""`portal datasets`, `portal templates` and `portal pipelines`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from portal_client.cli._base import (
    State,
    main,
    need_project,
    output_option,
    pass_state,
    pipeline_ref,
    project_option,
    yaml_mapping,
)
from portal_client.output import emit

# --- datasets ----------------------------------------------------------------------------------


@main.group()
def datasets() -> None:
    """Datasets and their versions (push a folder, pull a version)."""


@datasets.command("list")
@project_option
@output_option
@pass_state
def datasets_list(state: State, project: str | None) -> None:
    emit(list(state.client.datasets.list(project)), state.output)


@datasets.command("get")
@click.argument("name")
@project_option
@output_option
@pass_state
def datasets_get(state: State, name: str, project: str | None) -> None:
    """NAME: [project/]name."""
    emit(state.client.datasets.get(name, project), state.output)


@datasets.command("create")
@click.argument("name")
@project_option
@click.option("--description", default="")
@output_option
@pass_state
def datasets_create(state: State, name: str, project: str | None, description: str) -> None:
    project = need_project(project)
    emit(state.client.datasets.create(project, name, description), state.output)


@datasets.command("delete")
@click.argument("name")
@project_option
@click.option("--force", is_flag=True, help="Delete even if runs used it.")
@pass_state
def datasets_delete(state: State, name: str, project: str | None, force: bool) -> None:
    state.client.datasets.delete(name, project, force=force)
    click.echo(f"Deleted dataset {name}.")


@datasets.command("versions")
@click.argument("name")
@project_option
@output_option
@pass_state
def datasets_versions(state: State, name: str, project: str | None) -> None:
    emit(state.client.datasets.versions(name, project), state.output)


@datasets.command("push")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--dataset", "-d", required=True, help="[project/]name (created when missing).")
@project_option
@click.option("-m", "--message", default="", help="What changed.")
@output_option
@pass_state
def datasets_push(state: State, source: Path, dataset: str, project: str | None, message: str) -> None:
    """Upload SOURCE (a folder or a file) as a new version. Run it again after an interruption to resume."""

    def progress(path: str, done: int, size: int) -> None:
        if state.output == "table":
            click.echo(f"  {path}: {done}/{size} bytes", err=True)

    version = state.client.datasets.upload(source, dataset, project, message=message, progress=progress)
    if state.output == "table":
        made = "new version" if version.created is not False else "unchanged: same files as"
        click.echo(f"{made} {version.ref} ({version.file_count} files, {version.total_size} bytes)")
    else:
        emit(version, state.output)


@datasets.command("pull")
@click.argument("ref")
@click.argument("target", type=click.Path(file_okay=False, path_type=Path))
@project_option
@pass_state
def datasets_pull(state: State, ref: str, target: Path, project: str | None) -> None:
    """Download version REF ([project/]name@version, version a number or latest) into TARGET."""
    version = state.client.datasets.download(ref, target, project)
    click.echo(f"{version.ref}: {version.file_count} files in {target}", err=state.output != "table")


# --- templates and pipelines -------------------------------------------------------------------


@main.group()
def templates() -> None:
    """Job templates (built-in and your projects')."""


@templates.command("list")
@project_option
@output_option
@pass_state
def templates_list(state: State, project: str | None) -> None:
    emit(list(state.client.templates.list(project)), state.output)


@templates.command("get")
@click.argument("template_id", type=int)
@output_option
@pass_state
def templates_get(state: State, template_id: int) -> None:
    emit(state.client.templates.get(template_id), state.output)


@templates.command("apply")
@click.option("-f", "--file", "file", required=True, type=click.File("r"), help="The template's YAML ('-': stdin).")
@project_option
@output_option
@pass_state
def templates_apply(state: State, file: Any, project: str | None) -> None:
    """Create the template FILE describes (slug, name, command, args_schema, resources, …); applying it again with
    a changed field makes the next version of the slug."""
    definition = yaml_mapping(file)
    project = need_project(project or definition.pop("project", None))
    emit(state.client.templates.apply(project, definition), state.output)


@templates.command("delete")
@click.argument("template_id", type=int)
@pass_state
def templates_delete(state: State, template_id: int) -> None:
    state.client.templates.delete(template_id)
    click.echo(f"Deleted template {template_id}.")


@main.group()
def pipelines() -> None:
    """Pipelines: apply YAML, export, run."""


@pipelines.command("list")
@project_option
@output_option
@pass_state
def pipelines_list(state: State, project: str | None) -> None:
    emit(list(state.client.pipelines.list(project)), state.output)


@pipelines.command("get")
@click.argument("pipeline")
@project_option
@output_option
@pass_state
def pipelines_get(state: State, pipeline: str, project: str | None) -> None:
    """PIPELINE: an id or [project/]name."""
    emit(state.client.pipelines.get(pipeline, project), state.output)


@pipelines.command("apply")
@click.option("-f", "--file", "file", required=True, type=click.File("r"), help="Pipeline YAML (- for stdin).")
@project_option
@output_option
@pass_state
def pipelines_apply(state: State, file: Any, project: str | None) -> None:
    """Create the pipeline in the YAML file, or update the one with its name."""
    project = need_project(project)
    emit(state.client.pipelines.apply(project, file.read()), state.output)


@pipelines.command("export")
@click.argument("pipeline")
@project_option
@pass_state
def pipelines_export(state: State, pipeline: str, project: str | None) -> None:
    click.echo(state.client.pipelines.export(pipeline_ref(pipeline, project)), nl=False)


@pipelines.command("delete")
@click.argument("pipeline")
@project_option
@pass_state
def pipelines_delete(state: State, pipeline: str, project: str | None) -> None:
    state.client.pipelines.delete(pipeline_ref(pipeline, project))
    click.echo(f"Deleted pipeline {pipeline}.")
