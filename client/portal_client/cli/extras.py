"""`portal studies`, `portal knowledge`, `portal apps` and `portal labeling`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import yaml

from portal_client.cli._base import (
    State,
    main,
    need_project,
    output_option,
    pass_state,
    project_option,
    yaml_mapping,
)
from portal_client.errors import PortalError, RunFailed
from portal_client.output import emit

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
    definition = yaml_mapping(file)
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
