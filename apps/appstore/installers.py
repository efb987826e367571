"""What an app creates, one installer per kind of object (a section of the manifest's `spec`).

The installers create datasets, job templates, registered models, pipelines, inference services, knowledge bases,
notebooks and studies through the same services the pages use, so every rule of those apps holds. The app store sits
above every app whose objects it installs (docs/architecture.md), so their installers live here and call those apps'
services; a section no installer is registered for (`register_installer`) is refused ("nothing installs it").
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext


@dataclass
class InstallContext:
    """What an installer needs: where, by whom, the bundle's files, what was made so far (by kind and name), and
    the clean-ups of anything written outside the database, run when the install fails."""

    project: Any
    user: Any
    install: str
    files: dict[str, bytes]
    made: dict[tuple[str, str], Any] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)

    def find(self, kind: str, name: str) -> Any:
        return self.made.get((kind, name))


class Installer(Protocol):
    """Creates one object of a manifest section and removes it again."""

    kind: str
    order: int  # sections are installed in ascending order, removed in descending order

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any: ...

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        """Remove `obj` (True) or keep it as data (False); `install`: the installation's name."""
        ...

    def describe(self, entry: dict[str, Any]) -> str: ...


_INSTALLERS: dict[str, Installer] = {}


def register_installer(installer: Installer) -> None:
    _INSTALLERS[installer.kind] = installer


def installer_kinds() -> list[str]:
    return sorted(_INSTALLERS, key=lambda kind: _INSTALLERS[kind].order)


def get_installer(kind: str) -> Installer:
    return _INSTALLERS[kind]


def prefixed(exc: ValidationError, where: str) -> ValidationError:
    """A service's field errors moved under the manifest entry that caused them (`spec.services[0].name`)."""
    if hasattr(exc, "error_dict"):
        return ValidationError({f"{where}.{key}": messages for key, messages in exc.message_dict.items()})
    return ValidationError({where: exc.messages})


# --- The built-in installers ------------------------------------------------------------------------------------


class DatasetInstaller:
    """`datasets`: a dataset whose first version holds the bundle's `files` (paths kept below the entry's `strip`
    prefix). Uninstall keeps it unless asked (it is data)."""

    kind, order = "datasets", 10

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.datasets import services
        from apps.datasets.blobs import sha256_of

        fields = {k: entry[k] for k in ("description", "licence", "source") if k in entry}
        dataset = services.create_dataset(
            ctx.project, ctx.user, name=entry["name"], tags=entry.get("tags", []), **fields
        )
        strip = entry.get("strip", "")
        with tempfile.TemporaryDirectory() as tmp:
            shas = set()
            for path in entry.get("files", []):
                target = Path(tmp) / path.removeprefix(strip)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(ctx.files[path])
                shas.add(sha256_of(target))
            # Blobs are stored outside the database: the ones no version keeps go when the install fails.
            ctx.undo.append(lambda: services.purge_blobs(shas))
            services.version_from_directory(dataset, Path(tmp), user=ctx.user, message=_("Installed from an app"))
        return dataset

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.datasets.services import delete_dataset

        if delete_data:
            delete_dataset(obj, force=True)
        return delete_data

    def describe(self, entry: dict[str, Any]) -> str:
        count = len(entry.get("files", []))
        text = ngettext("Dataset “%(name)s” (%(count)s file)", "Dataset “%(name)s” (%(count)s files)", count)
        return text % {"name": entry["name"], "count": count}


class TemplateInstaller:
    """`templates`: a job template of the project (version 1, or the next version of one of that slug)."""

    kind, order = "templates", 20
    FIELDS = ("name", "category", "description", "image", "command", "workdir", "env", "args_schema", "resources",
              "kind", "framework", "replicas", "strategy", "timeout")  # fmt: skip

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.jobs.models import JobTemplate
        from apps.jobs.services import create_template

        fields = {k: entry[k] for k in self.FIELDS if k in entry}
        candidate = JobTemplate(project=ctx.project, slug=entry["slug"], **dict(fields.items()))
        candidate.full_clean(exclude=["project"], validate_unique=False, validate_constraints=False)
        return create_template(project=ctx.project, slug=entry["slug"], **fields)

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        obj.delete()  # frozen runs keep their own copy of what they ran
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        return _("Job template “%(slug)s”") % {"slug": entry["slug"]}


class ModelInstaller:
    """`models`: a registered model (the pipeline registers versions into it; a service follows its alias). With
    `files` (a model shipped in the bundle, e.g. a published service's), its first version is those files (below the
    entry's `strip` prefix), stored in the project's artifacts under its Default experiment, with `alias` set on it.
    Uninstall keeps it and its versions unless asked."""

    kind, order = "models", 30

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.models import registry
        from apps.models.errors import TrackingError

        try:
            model = registry.create_registered_model(
                ctx.project, entry["name"], description=entry.get("description", "")
            )
        except TrackingError as exc:
            raise ValidationError({f"{where}.name": [str(exc.message if hasattr(exc, "message") else exc)]}) from None
        if entry.get("files"):
            try:
                self._ship_version(ctx, model, entry)
            except TrackingError as exc:  # the project's storage quota, an alias name
                message = str(exc.message if hasattr(exc, "message") else exc)
                raise ValidationError({f"{where}.files": [message]}) from None
        return model

    def _ship_version(self, ctx: InstallContext, model: Any, entry: dict[str, Any]) -> None:
        import io
        import uuid

        from apps.models import artifacts, registry
        from apps.models.services import default_experiment

        experiment = default_experiment(ctx.project)
        root = f"{experiment.pk}/appstore/{uuid.uuid4().hex}/model"
        # Artifact files live outside the database: they go when the install fails.
        ctx.undo.append(lambda: artifacts.delete(root.rsplit("/", 1)[0]))
        strip = entry.get("strip", "")
        for path in entry["files"]:
            content = ctx.files[path]
            artifacts.save(f"{root}/{path.removeprefix(strip)}", io.BytesIO(content), declared=len(content))
        version = registry.create_model_version(
            model, source=f"mlflow-artifacts:/{root}", description=_("Shipped with the app."), user_id=ctx.user.username
        )
        if entry.get("alias"):
            registry.set_alias(model, entry["alias"], version.version)

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.models.registry import delete_registered_model

        if delete_data or not obj.versions.exists():
            delete_registered_model(obj)
            return True
        return False

    def describe(self, entry: dict[str, Any]) -> str:
        if entry.get("files"):
            return _("Registered model “%(name)s” with a version shipped in the app (%(count)s files)") % {
                "name": entry["name"], "count": len(entry["files"]),
            }  # fmt: skip
        return _("Registered model “%(name)s”") % {"name": entry["name"]}


class PipelineInstaller:
    """`pipelines`: a pipeline, validated as the editor's save validates it. Its runs stay after an uninstall."""

    kind, order = "pipelines", 40
    SPEC_KEYS = ("nodes", "parallelism", "failure_policy", "env", "priority", "params")

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.jobs.services import save_pipeline

        spec = {k: entry[k] for k in self.SPEC_KEYS if k in entry}
        return save_pipeline(
            ctx.project, ctx.user, name=entry["name"], spec=spec, description=entry.get("description", "")
        )

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        obj.delete()  # runs keep their frozen spec (pipeline SET_NULL)
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        return _("Pipeline “%(name)s” (%(count)s steps)") % {"name": entry["name"], "count": len(entry["nodes"])}


class ServiceInstaller:
    """`services`: an inference service of a model the app registers, following an alias (it waits, saying so,
    until the pipeline sets the alias, then deploys) or pinned to a version; or, with `framework: llm` and no
    `model`, the packaged chat model (SmolLM2-135M-Instruct) on the `llm` runtime (`.venv-llm`, as the demo's `chat`
    service), deployed once the install commits and an agent can run it."""

    kind, order = "services", 50
    SETTINGS = ("description", "framework", "cpu", "memory", "gpu", "min_replicas", "max_replicas", "scale_target")
    DEPLOY_WAIT = 15 * 60  # seconds an llm service waits for an agent to start it

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.models.models import RegisteredModel
        from apps.serving.services import create_service

        values = {k: entry[k] for k in self.SETTINGS if k in entry}
        if is_packaged_llm(entry):
            return self._create_llm(ctx, entry, values)
        model = (
            ctx.find("models", entry["model"])
            or RegisteredModel.objects.filter(project=ctx.project, name=entry["model"]).first()
        )
        if model is None:
            raise ValidationError({f"{where}.model": [_("No registered model “%(name)s”.") % {"name": entry["model"]}]})
        return create_service(
            ctx.project,
            ctx.user,
            name=entry["name"],
            allow_waiting=True,
            registered_model=model,
            follow_alias=entry.get("alias", "staging"),
            **values,
        )

    def _create_llm(self, ctx: InstallContext, entry: dict[str, Any], values: dict[str, Any]) -> Any:
        import time

        from apps.outbox.services import enqueue
        from apps.serving.services import create_service
        from apps.serving.tasks import deploy_when_possible

        service = create_service(ctx.project, ctx.user, name=entry["name"], **values)
        # Deployed after the commit, as the demo's chat service is: an install that fails sends nothing.
        enqueue(deploy_when_possible, service.pk, getattr(ctx.user, "pk", None), time.time() + self.DEPLOY_WAIT)
        return service

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.serving.services import delete_service

        delete_service(obj)
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        if is_packaged_llm(entry):
            return _("Inference service “%(name)s” serving the packaged chat model (SmolLM2-135M-Instruct)") % {
                "name": entry["name"]
            }
        return _("Inference service “%(name)s” serving “%(model)s”@%(alias)s") % {
            "name": entry["name"], "model": entry["model"], "alias": entry.get("alias", "staging"),
        }  # fmt: skip


def is_packaged_llm(entry: dict[str, Any]) -> bool:
    """A `services` entry of the packaged chat model: framework llm and no registered model."""
    return entry.get("framework") == "llm" and not entry.get("model")


class NotebookInstaller:
    """`notebooks`: a (stopped) notebook of the installing user, with the bundle's starter files copied into their
    folder under `<install>/`. Uninstall removes the notebook; the files are the user's and stay unless asked."""

    kind, order = "notebooks", 60

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.notebooks import workspace
        from apps.notebooks.services import create_notebook

        values = {k: entry[k] for k in ("ide", "cpu", "memory") if k in entry}
        notebook = create_notebook(ctx.project, ctx.user, name=entry["name"], **values)
        folder = workspace.home_dir(ctx.project, ctx.user) / ctx.install
        if folder.exists():
            raise ValidationError(
                {f"{where}.files": [_("The folder “%(name)s” exists already.") % {"name": ctx.install}]}
            )
        ctx.undo.append(lambda: shutil.rmtree(folder, ignore_errors=True))
        workspace.prepare(ctx.project, ctx.user)
        for path in entry.get("files", []):
            target = folder / Path(path).name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ctx.files[path])
        return notebook

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.notebooks import workspace
        from apps.notebooks.services import delete_notebook

        delete_notebook(obj)
        if delete_data and install:  # the starter files are the user's: they go only when asked
            folder = workspace.home_dir(obj.project, obj.owner) / install
            transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        return _("Notebook “%(name)s” with %(files)s") % {
            "name": entry["name"],
            "files": ", ".join(entry.get("files", [])),
        }


class StudyInstaller:
    """`studies`: a hyperparameter study (apps.hpo), defined as the study form's YAML is (name, objectives, space,
    algorithm, early_stopping, budget, seed, trial_template — which may name a pipeline the app installs). It starts
    when the install commits. Uninstall stops it (its trials' runs are cancelled) and deletes it with its Optuna
    study; the trials' runs, tracking runs and registered versions stay."""

    kind, order = "studies", 45  # after the pipelines its trial template may name
    FIELDS = (
        "name", "description", "objectives", "space", "algorithm", "early_stopping", "budget", "seed", "trial_template",
    )  # fmt: skip

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.hpo import services, storage

        document = {k: entry[k] for k in self.FIELDS if k in entry}
        study = services.create_study(ctx.project, ctx.user, document)  # its field errors: under `where` (install)
        ctx.undo.append(lambda: storage.delete([study.optuna_name]))  # Optuna's rows are outside the transaction
        return study

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.hpo import services, storage

        services.stop_study(obj, _("Uninstalled."))
        name = obj.optuna_name
        obj.delete()
        transaction.on_commit(lambda: storage.delete([name]))
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        budget = entry.get("budget") if isinstance(entry.get("budget"), dict) else {}
        return _("Study “%(name)s” tuning %(params)s (%(trials)s trials)") % {
            "name": entry["name"],
            "params": ", ".join(entry.get("space") or {}),
            "trials": budget.get("max_trials", "?"),
        }


class KnowledgeBaseInstaller:
    """`knowledge_bases`: a knowledge base (apps.knowledge) over documents shipped in the bundle (`files`, named by
    their path below `strip`) and/or the readable files of a dataset of the project (`dataset`: name or name@version,
    e.g. one the app installs or one a parameter names), answering with `service` (an `llm` service of the install,
    by its name in `spec.services`, or one of the project's). Its documents are queued for ingestion when the
    install commits. Uninstall deletes the base with its documents and chunks: they are copies of the bundle's
    files and of the dataset version, which stays unless `delete_data`."""

    kind, order = "knowledge_bases", 55  # after the service that answers it

    def create(self, ctx: InstallContext, entry: dict[str, Any], where: str) -> Any:
        from apps.knowledge import services

        fields: dict[str, Any] = {"description": entry.get("description", "")}
        if entry.get("service"):
            fields["llm_service"] = self._service(ctx, entry["service"], where)
        try:
            kb = services.create_knowledge_base(ctx.project, ctx.user, entry["name"], **fields)
        except ValidationError as exc:
            raise self._renamed(exc, {"llm_service": "service"}) from None
        tags = entry.get("tags", [])
        strip = entry.get("strip", "")
        for index, path in enumerate(entry.get("files", [])):
            try:
                services.add_document(
                    kb, ctx.user, path.removeprefix(strip), ctx.files[path], tags=tags, source=f"app:{ctx.install}"
                )
            except ValidationError as exc:
                raise self._renamed(exc, {"file": f"files[{index}]", "name": f"files[{index}]"}) from None
        if entry.get("dataset"):
            try:
                services.add_dataset_version(kb, ctx.user, self._dataset_version(ctx, entry["dataset"]), tags=tags)
            except ValidationError as exc:
                raise self._renamed(exc, {"file": "dataset"}) from None
        return kb

    @staticmethod
    def _service(ctx: InstallContext, name: str, where: str) -> Any:
        from apps.serving.models import InferenceService

        service = ctx.find("services", name) or InferenceService.objects.filter(project=ctx.project, name=name).first()
        if service is None:
            raise ValidationError({f"{where}.service": [_("No inference service “%(name)s”.") % {"name": name}]})
        return service

    @staticmethod
    def _dataset_version(ctx: InstallContext, ref: Any) -> Any:
        from apps.datasets.models import DatasetVersion

        name, _sep, number = str(ref).partition("@")
        versions = DatasetVersion.objects.filter(dataset__project=ctx.project, dataset__name=name.strip())
        if number:
            version = versions.filter(number=number).first() if number.isdigit() else None
        else:
            version = versions.order_by("-number").first()
        if version is None:
            raise ValidationError(
                {"dataset": [_("No dataset version “%(ref)s” in the project (name or name@version).") % {"ref": ref}]}
            )
        return version

    @staticmethod
    def _renamed(exc: ValidationError, names: dict[str, str]) -> ValidationError:
        """The knowledge service's field names as the manifest entry's (`llm_service` is the entry's `service`)."""
        if not hasattr(exc, "error_dict"):
            return exc
        return ValidationError({names.get(key, key): messages for key, messages in exc.message_dict.items()})

    def remove(self, obj: Any, *, delete_data: bool, install: str = "") -> bool:
        from apps.knowledge.services import delete_knowledge_base

        delete_knowledge_base(obj)
        return True

    def describe(self, entry: dict[str, Any]) -> str:
        count = len(entry.get("files") or [])
        parts = []
        if count:
            parts.append(
                ngettext("%(count)s document of the app", "%(count)s documents of the app", count) % {"count": count}
            )
        if entry.get("dataset"):
            parts.append(_("the files of dataset “%(dataset)s”") % {"dataset": entry["dataset"]})
        text = _("Knowledge base “%(name)s” over %(documents)s") % {
            "name": entry["name"], "documents": _(" and ").join(parts) or _("no documents yet"),
        }  # fmt: skip
        if entry.get("service"):
            text += _(", answered by “%(service)s”") % {"service": entry["service"]}
        return text


def register_builtin_installers() -> None:
    for installer in (DatasetInstaller(), TemplateInstaller(), ModelInstaller(), PipelineInstaller(),
                      StudyInstaller(), ServiceInstaller(), KnowledgeBaseInstaller(), NotebookInstaller()):  # fmt: skip
        register_installer(installer)
