"""`portal models`, `portal services` and `portal notebooks`."""

from __future__ import annotations

import json
from typing import Any

import click

from portal_client.cli._base import (
    State,
    main,
    need_project,
    output_option,
    pass_state,
    project_option,
)
from portal_client.output import emit

# --- models ------------------------------------------------------------------------------------


@main.group()
def models() -> None:
    """Registered models, versions and aliases."""


@models.command("list")
@project_option
@output_option
@pass_state
def models_list(state: State, project: str | None) -> None:
    emit(list(state.client.models.list(project)), state.output)


@models.command("get")
@click.argument("model")
@project_option
@output_option
@pass_state
def models_get(state: State, model: str, project: str | None) -> None:
    emit(state.client.models.get(model, project), state.output)


@models.command("create")
@click.argument("name")
@project_option
@click.option("--description", default="")
@output_option
@pass_state
def models_create(state: State, name: str, project: str | None, description: str) -> None:
    project = need_project(project)
    emit(state.client.models.create(project, name, description), state.output)


@models.command("delete")
@click.argument("model")
@project_option
@pass_state
def models_delete(state: State, model: str, project: str | None) -> None:
    state.client.models.delete(_ref(model, project))
    click.echo(f"Deleted model {model}.")


@models.command("versions")
@click.argument("model")
@project_option
@output_option
@pass_state
def models_versions(state: State, model: str, project: str | None) -> None:
    emit(state.client.models.versions(_ref(model, project)), state.output)


@models.command("alias")
@click.argument("model")
@click.argument("alias")
@click.argument("version", type=int, required=False)
@click.option("--delete", is_flag=True, help="Remove the alias.")
@project_option
@output_option
@pass_state
def models_alias(state: State, model: str, alias: str, version: int | None, delete: bool, project: str | None) -> None:
    """Point ALIAS of MODEL at VERSION (or --delete it)."""
    if delete:
        state.client.models.delete_alias(_ref(model, project), alias)
        click.echo(f"Removed alias {alias}.")
        return
    if version is None:
        raise click.UsageError("Give the version number the alias points at.")
    emit(state.client.models.set_alias(_ref(model, project), alias, version), state.output)


def _ref(name: str, project: str | None) -> str:
    return name if name.isdigit() or "/" in name or not project else f"{project}/{name}"


# --- services ----------------------------------------------------------------------------------


@main.group()
def services() -> None:
    """Inference services: deploy, promote, predict."""


@services.command("list")
@project_option
@output_option
@pass_state
def services_list(state: State, project: str | None) -> None:
    emit(list(state.client.services.list(project)), state.output)


@services.command("get")
@click.argument("service")
@project_option
@output_option
@pass_state
def services_get(state: State, service: str, project: str | None) -> None:
    emit(state.client.services.get(_ref(service, project)), state.output)


@services.command("create")
@click.argument("name")
@click.option("--model", "registered_model", required=True, help="Registered model name.")
@click.option("--version", "model_version", type=int, help="Model version (default: follow --alias).")
@click.option("--alias", "follow_alias", default="", help="Follow this alias.")
@project_option
@output_option
@pass_state
def services_create(
    state: State, name: str, registered_model: str, model_version: int | None, follow_alias: str, project: str | None
) -> None:
    project = need_project(project)
    fields: dict[str, Any] = {"model_version": model_version}
    if follow_alias:
        fields["follow_alias"] = follow_alias
    emit(state.client.services.create(project, name, registered_model, **fields), state.output)


@services.command("deploy")
@click.argument("service")
@project_option
@click.option("--wait", is_flag=True, help="Wait until it serves (exit 10 if it fails).")
@output_option
@pass_state
def services_deploy(state: State, service: str, project: str | None, wait: bool) -> None:
    result = state.client.services.deploy(_ref(service, project))
    if wait:
        result = state.client.services.wait_ready(_ref(service, project))
    emit(result, state.output)


@services.command("canary")
@click.argument("service")
@click.option("--percent", type=click.IntRange(0, 100), required=True, help="The canary's share once ready.")
@click.option("--version", "model_version", type=int, help="Model version (default: what the settings say).")
@project_option
@output_option
@pass_state
def services_canary(state: State, service: str, percent: int, model_version: int | None, project: str | None) -> None:
    """Deploy a canary revision taking PERCENT % of the requests once ready (`promote` makes it current)."""
    emit(state.client.services.canary(_ref(service, project), percent, model_version), state.output)


@services.command("rollback")
@click.argument("service")
@click.argument("revision", type=int)
@project_option
@output_option
@pass_state
def services_rollback(state: State, service: str, revision: int, project: str | None) -> None:
    """Serve revision number REVISION's version and config again (as a new revision)."""
    emit(state.client.services.rollback(_ref(service, project), revision), state.output)


@services.command("revisions")
@click.argument("service")
@project_option
@output_option
@pass_state
def services_revisions(state: State, service: str, project: str | None) -> None:
    emit(state.client.services.revisions(_ref(service, project)), state.output)


@services.command("stop")
@click.argument("service")
@project_option
@output_option
@pass_state
def services_stop(state: State, service: str, project: str | None) -> None:
    """Stop every replica (`start` serves the same again)."""
    emit(state.client.services.stop(_ref(service, project)), state.output)


@services.command("start")
@click.argument("service")
@project_option
@output_option
@pass_state
def services_start(state: State, service: str, project: str | None) -> None:
    emit(state.client.services.start(_ref(service, project)), state.output)


@services.command("promote")
@click.argument("service")
@project_option
@output_option
@pass_state
def services_promote(state: State, service: str, project: str | None) -> None:
    emit(state.client.services.promote(_ref(service, project)), state.output)


@services.command("delete")
@click.argument("service")
@project_option
@pass_state
def services_delete(state: State, service: str, project: str | None) -> None:
    state.client.services.delete(_ref(service, project))
    click.echo(f"Deleted service {service}.")


@services.command("predict")
@click.argument("service")
@click.option("--json", "body", required=True, type=click.File("r"), help="The request body file (- for stdin).")
@project_option
@pass_state
def services_predict(state: State, service: str, body: Any, project: str | None) -> None:
    """Send an Open Inference Protocol v2 request; prints the answer as JSON."""
    try:
        payload = json.load(body)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--json") from None
    click.echo(json.dumps(state.client.services.predict(_ref(service, project), payload), indent=2))


# --- notebooks ---------------------------------------------------------------------------------


@main.group()
def notebooks() -> None:
    """Notebooks (JupyterLab, VS Code)."""


@notebooks.command("list")
@project_option
@output_option
@pass_state
def notebooks_list(state: State, project: str | None) -> None:
    emit(list(state.client.notebooks.list(project)), state.output)


@notebooks.command("get")
@click.argument("notebook_id", type=int)
@output_option
@pass_state
def notebooks_get(state: State, notebook_id: int) -> None:
    emit(state.client.notebooks.get(notebook_id), state.output)


@notebooks.command("create")
@click.argument("name")
@project_option
@click.option("--ide", default=None, help="jupyterlab or vscode")
@output_option
@pass_state
def notebooks_create(state: State, name: str, project: str | None, ide: str | None) -> None:
    project = need_project(project)
    fields = {"ide": ide} if ide else {}
    emit(state.client.notebooks.create(project, name, **fields), state.output)


@notebooks.command("start")
@click.argument("notebook_id", type=int)
@output_option
@pass_state
def notebooks_start(state: State, notebook_id: int) -> None:
    emit(state.client.notebooks.start(notebook_id), state.output)


@notebooks.command("stop")
@click.argument("notebook_id", type=int)
@output_option
@pass_state
def notebooks_stop(state: State, notebook_id: int) -> None:
    emit(state.client.notebooks.stop(notebook_id), state.output)


@notebooks.command("delete")
@click.argument("notebook_id", type=int)
@pass_state
def notebooks_delete(state: State, notebook_id: int) -> None:
    state.client.notebooks.delete(notebook_id)
    click.echo(f"Deleted notebook {notebook_id}.")
