"""The `portal` command: everything the pages do, from a terminal or a CI job.

Exit codes: 0 success; 1 other error; 2 invalid input (400, bad usage); 3 portal unreachable; 4 not logged in
(401); 5 forbidden (403); 6 not found (404); 7 conflict (409); 8 rate limited; 9 server error; 10 a run (or
service) that was waited for failed; 11 a wait timed out."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from portal_client import config
from portal_client.client import Client
from portal_client.errors import APIError, PortalError, RunFailed
from portal_client.output import FORMATS, emit


class State:
    def __init__(self, server: str | None, output: str) -> None:
        self.server = server
        self.output = output
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_config(self.server)
        return self._client


pass_state = click.make_pass_decorator(State)


def output_option(command: Any) -> Any:
    """`-o/--output table|json|yaml` and `--json` on every command that prints objects (also after the verb)."""

    def set_output(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value:
            ctx.ensure_object(State).output = "json" if value is True else value

    command = click.option("--json", "as_json", is_flag=True, expose_value=False, callback=set_output,
                           help="Print JSON (same as -o json).")(command)  # fmt: skip
    return click.option("-o", "--output", type=click.Choice(FORMATS), expose_value=False, callback=set_output,
                        help="Output format.")(command)  # fmt: skip


class PortalGroup(click.Group):
    """Turns the client's errors into one line on stderr and a meaningful exit code (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RunFailed as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except APIError as exc:
            click.echo(f"Error ({exc.status_code}): {exc.message}", err=True)
            sys.exit(exc.exit_code)
        except PortalError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except FileNotFoundError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
        except yaml.YAMLError as exc:  # a --param value or a --params-file that is not YAML
            click.echo(f"Error: not YAML: {exc}", err=True)
            sys.exit(2)


@click.group(cls=PortalGroup)
@click.option("--server", envvar="PORTAL_URL", help="The portal's URL (default: the one you logged in to last).")
@click.option("-o", "--output", type=click.Choice(FORMATS), default="table", help="Output format.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (same as -o json).")
@click.version_option(package_name="portal-client")
@click.pass_context
def main(ctx: click.Context, server: str | None, output: str, as_json: bool) -> None:
    """Command line of the MLOps portal. Start with `portal login URL`."""
    ctx.obj = State(server, "json" if as_json else output)


# --- login -------------------------------------------------------------------------------------


@main.command()
@click.argument("url")
@click.option("--token", envvar="PORTAL_TOKEN", help="An API token (asked for when not given).")
def login(url: str, token: str | None) -> None:
    """Check TOKEN against the portal at URL and store it (in the user's config folder, mode 0600)."""
    if not token:
        token = click.prompt("API token (the portal's user menu → API tokens)", hide_input=True)
    url = config.normalise(url)
    with Client(url, token) as client:
        me = client.whoami()
    path = config.store(url, token, me.get("username", ""))
    click.echo(f"Logged in to {url} as {me.get('username')} (token stored in {path}).")


@main.command()
@click.argument("url", required=False)
def logout(url: str | None) -> None:
    """Forget the token of URL (default: the current server)."""
    url = url or config.resolve(None)[0]
    if config.forget(url):
        click.echo(f"Logged out of {config.normalise(url)}.")
    else:
        raise PortalError(f"Not logged in to {url}.")


@main.command()
@output_option
@pass_state
def whoami(state: State) -> None:
    """Who the stored token belongs to."""
    emit(state.client.whoami(), state.output)


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: `eval "$(portal completion bash)"`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(main, {}, "portal", "_PORTAL_COMPLETE").source())


# --- projects ----------------------------------------------------------------------------------


@main.group()
def projects() -> None:
    """Projects you belong to."""


@projects.command("list")
@output_option
@pass_state
def projects_list(state: State) -> None:
    emit(list(state.client.projects.list()), state.output)


@projects.command("get")
@click.argument("slug")
@output_option
@pass_state
def projects_get(state: State, slug: str) -> None:
    emit(state.client.projects.get(slug), state.output)


@projects.command("create")
@click.argument("slug")
@click.option("--name", help="Display name (default: the slug).")
@click.option("--description", default="")
@output_option
@pass_state
def projects_create(state: State, slug: str, name: str | None, description: str) -> None:
    emit(state.client.projects.create(slug, name or slug, description), state.output)


@projects.command("delete")
@click.argument("slug")
@click.confirmation_option(prompt="Delete the project and everything in it?")
@pass_state
def projects_delete(state: State, slug: str) -> None:
    state.client.projects.delete(slug)
    click.echo(f"Deleted project {slug}.")


# --- datasets ----------------------------------------------------------------------------------

project_option = click.option("-p", "--project", envvar="PORTAL_PROJECT", help="Project slug.")


def need_project(project: str | None) -> str:
    """The project a command that creates something must be given (--project or PORTAL_PROJECT)."""
    if not project:
        raise click.UsageError("Give the project: --project SLUG.")
    return project


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
    definition = _yaml_mapping(file)
    project = need_project(project or definition.pop("project", None))
    emit(state.client.templates.apply(project, definition), state.output)


@templates.command("delete")
@click.argument("template_id", type=int)
@pass_state
def templates_delete(state: State, template_id: int) -> None:
    state.client.templates.delete(template_id)
    click.echo(f"Deleted template {template_id}.")


def _yaml_mapping(file: Any) -> dict[str, Any]:
    try:
        definition = yaml.safe_load(file.read())
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"not YAML: {exc}", param_hint="--file") from None
    if not isinstance(definition, dict):
        raise click.UsageError("The file is not a YAML mapping.")
    return definition


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
    click.echo(state.client.pipelines.export(_pipeline_ref(pipeline, project)), nl=False)


@pipelines.command("delete")
@click.argument("pipeline")
@project_option
@pass_state
def pipelines_delete(state: State, pipeline: str, project: str | None) -> None:
    state.client.pipelines.delete(_pipeline_ref(pipeline, project))
    click.echo(f"Deleted pipeline {pipeline}.")


def _pipeline_ref(pipeline: str, project: str | None) -> str:
    return pipeline if pipeline.isdigit() or "/" in pipeline or not project else f"{project}/{pipeline}"


# --- runs --------------------------------------------------------------------------------------


@main.group()
def runs() -> None:
    """Pipeline runs: submit, wait, logs, cancel, retry, re-run from a node."""


@runs.command("list")
@project_option
@click.option("--status", help="queued, running, succeeded, failed, cancelling, cancelled")
@click.option("--limit", default=20, show_default=True)
@output_option
@pass_state
def runs_list(state: State, project: str | None, status: str | None, limit: int) -> None:
    found = []
    for run in state.client.runs.list(project, status=status):
        found.append(run)
        if len(found) >= limit:
            break
    emit(found, state.output)


@runs.command("get")
@click.argument("run_id", type=int)
@output_option
@pass_state
def runs_get(state: State, run_id: int) -> None:
    emit(state.client.runs.get(run_id), state.output)


@runs.command("tasks")
@click.argument("run_id", type=int)
@output_option
@pass_state
def runs_tasks(state: State, run_id: int) -> None:
    emit(state.client.runs.tasks(run_id), state.output)


def _wait(state: State, run_id: int, timeout: float | None, follow: bool) -> None:
    client = state.client
    if follow:
        for line in client.logs.follow(run_id):
            click.echo(line.format())
    run = client.runs.wait(
        run_id, timeout, on_change=lambda r: click.echo(f"run {r.id}: {r.status}", err=True) if not follow else None
    )
    emit(run, state.output) if state.output != "table" else click.echo(f"run {run.id} {run.status}", err=True)
    if not run.succeeded:
        raise RunFailed(run)


@runs.command("submit")
@click.argument("pipeline")
@project_option
@click.option("--wait", is_flag=True, help="Wait for the end; exit 10 unless it succeeded.")
@click.option("-f", "--follow", is_flag=True, help="Stream the logs until the end (implies --wait).")
@click.option("--timeout", type=float, help="Give up waiting after this many seconds (exit 11).")
@click.option("--idempotency-key", help="Retrying with the same key starts no second run.")
@output_option
@pass_state
def runs_submit(
    state: State, pipeline: str, project: str | None, wait: bool, follow: bool, timeout: float | None,
    idempotency_key: str | None,
) -> None:  # fmt: skip
    """Start a run of PIPELINE (an id or [project/]name)."""
    run = state.client.pipelines.run(_pipeline_ref(pipeline, project), idempotency_key=idempotency_key)
    if not (wait or follow):
        emit(run, state.output)
        return
    click.echo(f"started run {run.id} ({run.pipeline_name}#{run.number})", err=True)
    _wait(state, run.id, timeout, follow)


@runs.command("wait")
@click.argument("run_id", type=int)
@click.option("--timeout", type=float)
@output_option
@pass_state
def runs_wait(state: State, run_id: int, timeout: float | None) -> None:
    """Wait for RUN_ID to finish; exit 10 unless it succeeded."""
    _wait(state, run_id, timeout, follow=False)


@runs.command("logs")
@click.argument("run_id", type=int)
@click.option("-f", "--follow", is_flag=True, help="Keep streaming live lines until the run ends.")
@click.option("--node", help="Only this node's lines.")
@click.option("--replica", help="Only this replica's lines.")
@click.option("--task", type=int, help="Only this attempt (task-run id).")
@click.option("--search", "-s", "q", help="Only lines containing this text (ignoring case).")
@output_option
@pass_state
def runs_logs(
    state: State, run_id: int, follow: bool, node: str | None, replica: str | None, task: int | None, q: str | None
) -> None:
    """Print a run's log (`-f`: and follow it live). With -o json, one JSON object per line."""
    client = state.client
    if follow:
        if node or q:
            raise click.UsageError("--follow filters by --task and --replica only.")
        lines = client.logs.follow(run_id, task=task, replica=replica)
    else:
        lines = client.logs.history(run_id, node=node, replica=replica, task=task, q=q)
    printed = 0
    for line in lines:
        printed += 1
        click.echo(json.dumps(line.to_dict()) if state.output == "json" else line.format())
    if not printed and not (node or replica or task or q):
        tasks = client.runs.tasks(run_id)
        if tasks and all(t.status == "cached" for t in tasks):  # a rerun with the same inputs wrote nothing
            click.echo(f"No log lines: every task of run {run_id} was cached (it reused the outputs of earlier "
                       f"runs: `portal runs tasks {run_id}` names them).", err=True)  # fmt: skip
        else:
            click.echo(f"No log lines (yet) for run {run_id}.", err=True)


@runs.command("cancel")
@click.argument("run_id", type=int)
@output_option
@pass_state
def runs_cancel(state: State, run_id: int) -> None:
    emit(state.client.runs.cancel(run_id), state.output)


@runs.command("retry")
@click.argument("run_id", type=int)
@output_option
@pass_state
def runs_retry(state: State, run_id: int) -> None:
    """A new run reusing what succeeded; the rest runs again."""
    emit(state.client.runs.retry(run_id), state.output)


@runs.command("rerun")
@click.argument("run_id", type=int)
@click.option("--node", required=True, help="Re-run from this node (it and everything downstream).")
@output_option
@pass_state
def runs_rerun(state: State, run_id: int, node: str) -> None:
    emit(state.client.runs.rerun(run_id, node), state.output)


@runs.command("delete")
@click.argument("run_id", type=int)
@pass_state
def runs_delete(state: State, run_id: int) -> None:
    state.client.runs.delete(run_id)
    click.echo(f"Deleted run {run_id}.")


# --- experiments and models --------------------------------------------------------------------


@main.group()
def experiments() -> None:
    """Experiments and their tracked runs."""


@experiments.command("list")
@project_option
@output_option
@pass_state
def experiments_list(state: State, project: str | None) -> None:
    emit(list(state.client.experiments.list(project)), state.output)


@experiments.command("get")
@click.argument("experiment_id", type=int)
@output_option
@pass_state
def experiments_get(state: State, experiment_id: int) -> None:
    emit(state.client.experiments.get(experiment_id), state.output)


@experiments.command("create")
@click.argument("name")
@project_option
@output_option
@pass_state
def experiments_create(state: State, name: str, project: str | None) -> None:
    emit(state.client.experiments.create(need_project(project), name), state.output)


@experiments.command("delete")
@click.argument("experiment_id", type=int)
@pass_state
def experiments_delete(state: State, experiment_id: int) -> None:
    """Mark the experiment and its runs deleted (as MLflow does)."""
    state.client.experiments.delete(experiment_id)
    click.echo(f"Deleted experiment {experiment_id}.")


@experiments.command("runs")
@click.argument("experiment_id", type=int)
@output_option
@pass_state
def experiments_runs(state: State, experiment_id: int) -> None:
    emit(list(state.client.experiments.runs(experiment_id)), state.output)


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


# --- notebooks and tokens ----------------------------------------------------------------------


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


@main.group()
def tokens() -> None:
    """Your API tokens."""


@tokens.command("list")
@output_option
@pass_state
def tokens_list(state: State) -> None:
    emit(list(state.client.tokens.list()), state.output)


@tokens.command("create")
@click.argument("name")
@project_option
@click.option("--scope", type=click.Choice(["read", "write"]), default="write", show_default=True)
@click.option("--days", type=int, help="Expire after this many days.")
@output_option
@pass_state
def tokens_create(state: State, name: str, project: str | None, scope: str, days: int | None) -> None:
    """Create a token; its secret is printed once."""
    emit(state.client.tokens.create(name, project, scope, days), state.output)


@tokens.command("revoke")
@click.argument("token_id", type=int)
@pass_state
def tokens_revoke(state: State, token_id: int) -> None:
    state.client.tokens.revoke(token_id)
    click.echo(f"Revoked token {token_id}.")


# --- studies -----------------------------------------------------------------------------------


@main.group()
def studies() -> None:
    """Hyperparameter studies (create from YAML, trials, stop, register the best model)."""


@studies.command("list")
@project_option
@click.option("--status", help="running, completed, stopped or failed.")
@output_option
@pass_state
def studies_list(state: State, project: str | None, status: str | None) -> None:
    emit(list(state.client.studies.list(project, status=status)), state.output)


@studies.command("get")
@click.argument("study")
@project_option
@output_option
@pass_state
def studies_get(state: State, study: str, project: str | None) -> None:
    """STUDY: an id or [project/]name."""
    emit(state.client.studies.get(study, project), state.output)


@studies.command("create")
@click.option("-f", "--file", "file", type=click.File("r"), required=True, help="The study's YAML ('-': stdin).")
@project_option
@click.option("--wait", is_flag=True, help="Wait for the study to end; exit 10 unless it completed.")
@click.option("--timeout", type=float, help="Seconds to wait at most (exit 11 after).")
@output_option
@pass_state
def studies_create(state: State, file: Any, project: str | None, wait: bool, timeout: float | None) -> None:
    """Create and start the study FILE describes (name, objectives, space, algorithm, budget, trial_template)."""
    definition = _yaml_mapping(file)
    project = project or definition.get("project")
    study = state.client.studies.create(need_project(project), definition)
    if wait:
        study = state.client.studies.wait(study.id, timeout=timeout)
    emit(study, state.output)
    if wait and study.status != "completed":
        sys.exit(RunFailed.exit_code)


@studies.command("trials")
@click.argument("study")
@project_option
@click.option("--status", help="Only trials in this status (e.g. pruned).")
@output_option
@pass_state
def studies_trials(state: State, study: str, project: str | None, status: str | None) -> None:
    emit(state.client.studies.trials(study, project, status=status), state.output)


@studies.command("stop")
@click.argument("study")
@project_option
@output_option
@pass_state
def studies_stop(state: State, study: str, project: str | None) -> None:
    """No new trials; the running ones are cancelled."""
    emit(state.client.studies.stop(study, project), state.output)


@studies.command("register-best")
@click.argument("study")
@click.option("--name", required=True, help="The registered model (made if new).")
@click.option("--artifact-path", default="model", show_default=True)
@project_option
@output_option
@pass_state
def studies_register_best(state: State, study: str, name: str, artifact_path: str, project: str | None) -> None:
    """Register the model the best trial logged as the next version of NAME."""
    emit(state.client.studies.register_best(study, name, project, artifact_path), state.output)


# --- knowledge bases ---------------------------------------------------------------------------


@main.group()
def knowledge() -> None:
    """Knowledge bases (documents, retrieval, cited answers)."""


@knowledge.command("list")
@project_option
@output_option
@pass_state
def knowledge_list(state: State, project: str | None) -> None:
    emit(list(state.client.knowledge.list(project)), state.output)


@knowledge.command("get")
@click.argument("kb")
@project_option
@output_option
@pass_state
def knowledge_get(state: State, kb: str, project: str | None) -> None:
    """KB: an id or [project/]name."""
    emit(state.client.knowledge.get(kb, project), state.output)


@knowledge.command("create")
@click.argument("name")
@project_option
@click.option("--description", default="")
@click.option("--llm-url", help="An OpenAI-compatible endpoint for chat.")
@click.option("--llm-model", help="The model name at that endpoint.")
@output_option
@pass_state
def knowledge_create(
    state: State, name: str, project: str | None, description: str, llm_url: str | None, llm_model: str | None
) -> None:
    fields = {key: value for key, value in (("llm_url", llm_url), ("llm_model", llm_model)) if value}
    emit(state.client.knowledge.create(need_project(project), name, description, **fields), state.output)


@knowledge.command("delete")
@click.argument("kb")
@project_option
@pass_state
def knowledge_delete(state: State, kb: str, project: str | None) -> None:
    state.client.knowledge.delete(kb, project)
    click.echo(f"Deleted knowledge base {kb}.")


@knowledge.command("upload")
@click.argument("kb")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@project_option
@click.option("--tag", "tags", multiple=True, help="A tag for the documents (repeat for more).")
@click.option("--wait", is_flag=True, help="Wait until they are ingested; exit 10 if one failed.")
@output_option
@pass_state
def knowledge_upload(
    state: State, kb: str, files: tuple[Path, ...], project: str | None, tags: tuple[str, ...], wait: bool
) -> None:
    """Add FILES (Markdown, text, HTML, PDF, CSV) as documents; the same content again adds no version."""
    docs = [state.client.knowledge.upload(kb, path, project, tags=list(tags)) for path in files]
    if wait:
        names = {doc.id for doc in docs}
        docs = [doc for doc in state.client.knowledge.wait_ingested(kb, project) if doc.id in names]
    emit(docs, state.output)
    if wait and any(doc.status == "failed" for doc in docs):
        sys.exit(RunFailed.exit_code)


@knowledge.command("documents")
@click.argument("kb")
@project_option
@output_option
@pass_state
def knowledge_documents(state: State, kb: str, project: str | None) -> None:
    emit(state.client.knowledge.documents(kb, project), state.output)


@knowledge.command("query")
@click.argument("kb")
@click.argument("text")
@project_option
@click.option("-k", type=int, default=5, show_default=True, help="How many passages.")
@click.option("--mode", type=click.Choice(["hybrid", "lexical", "dense"]), default="hybrid", show_default=True)
@output_option
@pass_state
def knowledge_query(state: State, kb: str, text: str, project: str | None, k: int, mode: str) -> None:
    """The best passages of KB for TEXT, with their scores."""
    result = state.client.knowledge.query(kb, text, project, k=k, mode=mode)
    if state.output != "table":
        emit(result, state.output)
        return
    if result["not_found"]:
        click.echo("Nothing relevant found.")
    columns = ["number", "document_name", "score", "text"]
    emit([{c: p[c] for c in columns} for p in result["passages"]], "table", columns)


@knowledge.command("chat")
@click.argument("kb")
@click.argument("question")
@project_option
@click.option("--no-stream", is_flag=True, help="Print the whole answer at once.")
@output_option
@pass_state
def knowledge_chat(state: State, kb: str, question: str, project: str | None, no_stream: bool) -> None:
    """Ask KB's LLM QUESTION; the answer streams to the terminal, then the passages it cites."""
    if no_stream or state.output != "table":
        emit(state.client.knowledge.chat(kb, question, project), state.output)
        return
    passages: list[dict[str, Any]] = []
    for event in state.client.knowledge.chat_stream(kb, question, project):
        if event.event == "passages":
            passages = event.data["passages"]
        elif event.event == "token":
            click.echo(event.data, nl=False)
        elif event.event == "error":
            click.echo("", err=True)
            raise PortalError(f"the LLM failed: {event.data}")
    click.echo("")
    for passage in passages:
        click.echo(f"[{passage['number']}] {passage['document_name']}", err=True)


# --- app store ---------------------------------------------------------------------------------


@main.group("apps")
def apps_group() -> None:
    """The app catalogue: search, install into a project, export and upload bundles."""


@apps_group.command("list")
@click.option("-q", "--search", help="Words in the name, title, summary or tags.")
@click.option("--category")
@click.option("--tag")
@output_option
@pass_state
def apps_list(state: State, search: str | None, category: str | None, tag: str | None) -> None:
    emit(list(state.client.apps.list(search, category=category, tag=tag)), state.output)


@apps_group.command("get")
@click.argument("app")
@output_option
@pass_state
def apps_get(state: State, app: str) -> None:
    """APP: an id or a name; its versions and what each creates."""
    found = state.client.apps.get(app)
    if state.output != "table":
        emit({**found.to_dict(), "versions": [v.to_dict() for v in state.client.apps.versions(found.id)]}, state.output)
        return
    emit(found, state.output)
    for version in state.client.apps.versions(found.id):
        click.echo(f"\nversion {version.version} creates:")
        for item in version.creates:
            click.echo(f"  {item['kind']}: {item['description']}")


@apps_group.command("install")
@click.argument("app")
@project_option
@click.option("--name", default="", help="The installation's name (default: the app's).")
@click.option("--version", "app_version", help="Default: the newest.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A parameter (VALUE read as YAML).")
@click.option("--params-file", type=click.File("r"), help="Parameters as a YAML or JSON mapping.")
@output_option
@pass_state
def apps_install(
    state: State,
    app: str,
    project: str | None,
    name: str,
    app_version: str | None,
    params: tuple[str, ...],
    params_file: Any,
) -> None:
    """Install APP into the project (all or nothing)."""
    parameters: dict[str, Any] = {}
    if params_file is not None:
        loaded = yaml.safe_load(params_file.read()) or {}
        if not isinstance(loaded, dict):
            raise click.UsageError("--params-file is not a mapping.")
        parameters.update(loaded)
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--param {item!r}: write KEY=VALUE.")
        parameters[key] = yaml.safe_load(value) if value else ""
    made = state.client.apps.install(need_project(project), app, name, parameters, app_version)
    emit(made, state.output)


@apps_group.command("installations")
@project_option
@output_option
@pass_state
def apps_installations(state: State, project: str | None) -> None:
    emit(list(state.client.installations.list(project)), state.output)


@apps_group.command("uninstall")
@click.argument("installation")
@project_option
@click.option("--delete-data", is_flag=True, help="Also delete the datasets and trained models it made.")
@pass_state
def apps_uninstall(state: State, installation: str, project: str | None, delete_data: bool) -> None:
    """INSTALLATION: an id or [project/]name."""
    state.client.installations.uninstall(installation, project, delete_data=delete_data)
    click.echo(f"Uninstalled {installation}.")


@apps_group.command("export")
@click.argument("app")
@click.argument("target", type=click.Path(path_type=Path), default=".")
@click.option("--version", "app_version", help="Default: the newest.")
@pass_state
def apps_export(state: State, app: str, target: Path, app_version: str | None) -> None:
    """Save APP's bundle zip to TARGET (a file or a folder; its digest is checked)."""
    path = state.client.apps.download(app, target, app_version)
    click.echo(f"Saved {path}.")


@apps_group.command("upload")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@project_option
@click.option("--visibility", type=click.Choice(["project", "public"]), default="project", show_default=True)
@output_option
@pass_state
def apps_upload(state: State, bundle: Path, project: str | None, visibility: str) -> None:
    """Add the zip BUNDLE as a new version of the project's app (project admins)."""
    emit(state.client.apps.upload(need_project(project), bundle, visibility), state.output)


# --- labeling ----------------------------------------------------------------------------------


@main.group()
def labeling() -> None:
    """Labeling projects (Label Studio): create from a dataset version, progress, export."""


@labeling.command("list")
@project_option
@output_option
@pass_state
def labeling_list(state: State, project: str | None) -> None:
    emit(list(state.client.labeling.list(project)), state.output)


@labeling.command("create")
@click.argument("name")
@project_option
@click.option("--dataset", required=True, help="[project/]name@version of the items to label.")
@click.option("--kind", required=True, help="image_classification, object_detection, text_classification, … or xml.")
@click.option("--label", "labels", multiple=True, help="A label (repeat for more).")
@click.option("--label-config", type=click.File("r"), help="Label Studio XML, for --kind xml.")
@click.option("--text-column", default="", help="The column holding the text (CSV/JSONL sources).")
@output_option
@pass_state
def labeling_create(
    state: State,
    name: str,
    project: str | None,
    dataset: str,
    kind: str,
    labels: tuple[str, ...],
    label_config: Any,
    text_column: str,
) -> None:
    version = state.client.datasets.version(dataset, project)
    fields: dict[str, Any] = {"text_column": text_column} if text_column else {}
    if label_config is not None:
        fields["label_config"] = label_config.read()
    made = state.client.labeling.create(
        project or version.project, name, version.id, kind, list(labels) if labels else None, **fields
    )
    emit(made, state.output)


@labeling.command("progress")
@click.argument("labeling_project")
@project_option
@output_option
@pass_state
def labeling_progress(state: State, labeling_project: str, project: str | None) -> None:
    """LABELING_PROJECT: an id or [project/]name."""
    emit(state.client.labeling.progress(labeling_project, project), state.output)


@labeling.command("export")
@click.argument("labeling_project")
@project_option
@output_option
@pass_state
def labeling_export(state: State, labeling_project: str, project: str | None) -> None:
    """Export the annotations as a new version of the dataset."""
    emit(state.client.labeling.export(labeling_project, project), state.output)


@labeling.command("delete")
@click.argument("labeling_project")
@project_option
@pass_state
def labeling_delete(state: State, labeling_project: str, project: str | None) -> None:
    state.client.labeling.delete(labeling_project, project)
    click.echo(f"Deleted labeling project {labeling_project}.")


if __name__ == "__main__":  # pragma: no cover
    main()
