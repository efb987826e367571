"""`portal runs` and `portal experiments`."""

from __future__ import annotations

import json

import click

from portal_client.cli._base import (
    State,
    main,
    need_project,
    output_option,
    pass_state,
    pipeline_ref,
    project_option,
)
from portal_client.errors import RunFailed
from portal_client.output import emit

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
@click.option("--ignore-cache", is_flag=True, help="Run every node, even one whose inputs have not changed.")
@output_option
@pass_state
def runs_submit(
    state: State, pipeline: str, project: str | None, wait: bool, follow: bool, timeout: float | None,
    idempotency_key: str | None, ignore_cache: bool,
) -> None:  # fmt: skip
    """Start a run of PIPELINE (an id or [project/]name)."""
    run = state.client.pipelines.run(
        pipeline_ref(pipeline, project), idempotency_key=idempotency_key, ignore_cache=ignore_cache
    )
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


# --- experiments -------------------------------------------------------------------------------


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
