"""`portal login/logout/whoami/completion`, projects and API tokens."""

from __future__ import annotations

import click

from portal_client import config
from portal_client.cli._base import (
    State,
    main,
    output_option,
    pass_state,
    project_option,
)
from portal_client.client import Client
from portal_client.errors import PortalError
from portal_client.output import emit

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
