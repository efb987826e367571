"""What every `portal` command shares: the state (server, output format, client), the options, the group that
turns errors into exit codes, and the `main` group the command families register on."""

from __future__ import annotations

import sys
from typing import Any

import click
import yaml

from portal_client.client import Client
from portal_client.errors import APIError, PortalError, RunFailed
from portal_client.output import FORMATS


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


project_option = click.option("-p", "--project", envvar="PORTAL_PROJECT", help="Project slug.")


def need_project(project: str | None) -> str:
    """The project a command that creates something must be given (--project or PORTAL_PROJECT)."""
    if not project:
        raise click.UsageError("Give the project: --project SLUG.")
    return project


def yaml_mapping(file: Any) -> dict[str, Any]:
    try:
        definition = yaml.safe_load(file.read())
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"not YAML: {exc}", param_hint="--file") from None
    if not isinstance(definition, dict):
        raise click.UsageError("The file is not a YAML mapping.")
    return definition


def pipeline_ref(pipeline: str, project: str | None) -> str:
    return pipeline if pipeline.isdigit() or "/" in pipeline or not project else f"{project}/{pipeline}"
