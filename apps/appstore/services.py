"""App store workflows: keep the built-in catalogue in step with `fixtures/apps/`, add an app version from a
bundle, install it into a project (all or nothing), uninstall, and the difference an upgrade would make."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.appstore import bundle as bundles
from apps.appstore.installers import InstallContext, get_installer, installer_kinds, prefixed
from apps.appstore.manifest import NAME_RE, clean_parameters, substitute
from apps.appstore.models import App, AppVersion, Installation, InstalledObject
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, has_project_perm

logger = logging.getLogger(__name__)


# --- The catalogue --------------------------------------------------------------------------------------------


def add_version(bundle: bundles.Bundle, *, project: Project | None = None, visibility: str | None = None) -> AppVersion:
    """The bundle as a new immutable version of its app (the app made on first use). The same version number with
    the same bytes is a no-op; with other bytes it is refused (a version never changes)."""
    data = bundle.to_zip()
    digest = bundles.digest(data)
    with transaction.atomic():
        app, _created = App.objects.get_or_create(
            name=bundle.name,
            project=project,
            defaults={
                "builtin": project is None,
                "approved": project is None,
                "visibility": visibility or (App.Visibility.PUBLIC if project is None else App.Visibility.PROJECT),
            },
        )
        existing = app.versions.filter(version=bundle.version).first()
        if existing is not None:
            if existing.digest != digest:
                raise ValidationError(
                    {"metadata.version": [_("Version %(v)s of %(app)s exists with other contents; give a new "
                                            "version number.") % {"v": bundle.version, "app": app.name}]}
                )  # fmt: skip
            return existing
        return AppVersion.objects.create(
            app=app, version=bundle.version, manifest=bundle.manifest, readme=bundle.readme, bundle=data, digest=digest
        )


def sync_builtin_apps() -> list[AppVersion]:
    """Every bundle under `fixtures/apps/` as a version of its built-in app (idempotent). A bundle that does not
    validate, or that changed without a new version number, stops with its folder and field errors."""
    synced = []
    for folder in bundles.builtin_folders():
        try:
            synced.append(add_version(bundles.load_folder(folder)))
        except ValidationError as exc:
            raise ImproperlyConfigured(f"{folder}: {exc.message_dict}") from exc
    return synced


def bundle_of(version: AppVersion) -> bundles.Bundle:
    return bundles.load_zip(bytes(version.bundle))


# --- Install ---------------------------------------------------------------------------------------------------


def plan(version: AppVersion) -> list[tuple[str, str]]:
    """What installing `version` creates, in order: (kind, description) per object, named as an install under
    the app's own name with the default parameters would name them."""
    spec = version.spec
    try:
        name = version.app.name
        params = clean_parameters(version.manifest, name, {})
        spec = substitute(spec, {"install": name, "params": params})
    except ValidationError:  # a required parameter without a default: show the placeholders
        pass
    return [(kind, get_installer(kind).describe(entry)) for kind in installer_kinds() for entry in spec.get(kind) or []]


def install(
    version: AppVersion, project: Project, user: Any, *, name: str = "", parameters: Any = None
) -> Installation:
    """Install `version` into `project` as `name` (default: the app's name): every object of the manifest is
    created through its app's service in one transaction, and what was written outside the database is removed
    again if any step fails, so a failed install leaves nothing. Errors are keyed by the manifest field at fault
    (`spec.pipelines[0].name`) or the parameter (`parameters.dataset`)."""
    if user is not None and not has_project_perm(user, project, CONTRIBUTE):
        raise PermissionDenied(_("Your role in this project does not allow installing apps."))
    name = (name or version.app.name).strip()
    if not NAME_RE.match(name):
        raise ValidationError({"name": [_("Lower-case letters, digits and hyphens, at most 50 characters.")]})
    if Installation.objects.filter(project=project, name=name).exists():
        raise ValidationError(
            {"name": [_("“%(name)s” is installed in this project already; choose another name to install it "
                        "again.") % {"name": name}]}
        )  # fmt: skip
    params = clean_parameters(version.manifest, name, parameters)
    spec = substitute(version.spec, {"install": name, "params": params})
    ctx = InstallContext(project=project, user=user, install=name, files=bundle_of(version).files)
    try:
        with transaction.atomic():
            try:
                installation = Installation.objects.create(
                    project=project, name=name, app_version=version, parameters=params, created_by=user
                )
            except IntegrityError:
                raise ValidationError(
                    {"name": [_("“%(name)s” is being installed already.") % {"name": name}]}
                ) from None
            _create_objects(installation, ctx, spec)
    except BaseException:
        for undo in reversed(ctx.undo):
            try:
                undo()
            except Exception:  # a clean-up that fails must not hide why the install failed
                logger.exception("appstore: clean-up after a failed install of %s", name)
        raise
    return installation


def _create_objects(installation: Installation, ctx: InstallContext, spec: dict[str, Any]) -> None:
    position = 0
    for kind in installer_kinds():
        installer = get_installer(kind)
        for index, entry in enumerate(spec.get(kind) or []):
            where = f"spec.{kind}[{index}]"
            try:
                with transaction.atomic():
                    obj = installer.create(ctx, entry, where)
            except ValidationError as exc:
                raise prefixed(exc, where) from None
            label = entry.get("slug") or entry["name"]
            ctx.made[(kind, label)] = obj
            InstalledObject.objects.create(
                installation=installation, kind=kind, name=label, position=position,
                content_type=ContentType.objects.get_for_model(obj), object_id=obj.pk,
            )  # fmt: skip
            position += 1


def uninstall(installation: Installation, *, delete_data: bool = False) -> list[str]:
    """Remove what the installation created, newest first, through each app's service; data (datasets, trained
    models, starter files) stays unless `delete_data`. Returns the names of the objects kept."""
    kept: list[str] = []
    order = {kind: position for position, kind in enumerate(installer_kinds())}
    with transaction.atomic():
        created = list(installation.created.all())
        created.sort(key=lambda o: (-order.get(o.kind, -1), -o.position))
        targets = [(record, record.target) for record in created]
        installation.delete()  # first, so that the audit log names the installation as what this request deleted
        for record, target in targets:
            if target is None:  # removed by hand since
                continue
            if not get_installer(record.kind).remove(target, delete_data=delete_data, install=installation.name):
                kept.append(f"{record.kind}:{record.name}")
    return kept


# --- Upgrade ----------------------------------------------------------------------------------------------------


def diff(installation: Installation, version: AppVersion, parameters: Any = None) -> dict[str, list[str]]:
    """What upgrading to `version` changes: objects added, removed and changed, as "kind:name"."""
    if version.app_id != installation.app_version.app_id:
        raise ValidationError({"version": [_("That is a version of another app.")]})
    context_old = {"install": installation.name, "params": installation.parameters}
    params = clean_parameters(version.manifest, installation.name, parameters or installation.parameters)
    old = _entries(substitute(installation.app_version.spec, context_old))
    new = _entries(substitute(version.spec, {"install": installation.name, "params": params}))
    return {
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
        "changed": sorted(k for k in set(old) & set(new) if old[k] != new[k]),
    }


def _entries(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{kind}:{entry.get('slug') or entry['name']}": entry
        for kind in installer_kinds()
        for entry in spec.get(kind) or []
    }


def upgrade(installation: Installation, version: AppVersion, user: Any, parameters: Any = None) -> Installation:
    """Apply `diff`: new objects are created, removed ones removed (data kept), changed pipelines saved with their
    new spec and changed templates get a new version; other changed objects are replaced."""
    changes = diff(installation, version, parameters)
    params = clean_parameters(version.manifest, installation.name, parameters or installation.parameters)
    spec = substitute(version.spec, {"install": installation.name, "params": params})
    new = _entries(spec)
    ctx = InstallContext(
        project=installation.project, user=user, install=installation.name, files=bundle_of(version).files
    )
    records = {f"{o.kind}:{o.name}": o for o in installation.created.all()}
    for record in records.values():
        ctx.made[(record.kind, record.name)] = record.target
    try:
        with transaction.atomic():
            for key in changes["removed"]:
                record = records[key]
                if record.target is not None:
                    get_installer(record.kind).remove(record.target, delete_data=False)
                record.delete()
            for key in changes["changed"]:
                _apply_change(installation, ctx, records[key], new[key])
            position = installation.created.count()
            for key in changes["added"]:
                kind, _sep, label = key.partition(":")
                where = f"spec.{kind}"
                try:
                    with transaction.atomic():
                        obj = get_installer(kind).create(ctx, new[key], where)
                except ValidationError as exc:
                    raise prefixed(exc, where) from None
                ctx.made[(kind, label)] = obj
                InstalledObject.objects.create(
                    installation=installation, kind=kind, name=label, position=position,
                    content_type=ContentType.objects.get_for_model(obj), object_id=obj.pk,
                )  # fmt: skip
                position += 1
            installation.app_version, installation.parameters = version, params
            installation.updated_at = timezone.now()
            installation.save(update_fields=["app_version", "parameters", "updated_at"])
    except BaseException:
        for undo in reversed(ctx.undo):
            undo()
        raise
    return installation


def _apply_change(installation: Installation, ctx: InstallContext, record: InstalledObject, entry: dict) -> None:
    from apps.jobs.services import save_pipeline

    target = record.target
    where = f"spec.{record.kind}"
    if record.kind == "pipelines" and target is not None:
        spec = {k: entry[k] for k in ("nodes", "parallelism", "failure_policy", "env", "priority") if k in entry}
        try:
            save_pipeline(ctx.project, ctx.user, name=target.name, spec=spec,
                          description=entry.get("description", ""), pipeline=target)  # fmt: skip
        except ValidationError as exc:
            raise prefixed(exc, where) from None
        return
    installer = get_installer(record.kind)
    answered = _knowledge_bases_answered_by(target) if record.kind == "services" else []
    if target is not None:
        installer.remove(target, delete_data=False)
    try:
        with transaction.atomic():
            obj = installer.create(ctx, entry, where)
    except ValidationError as exc:
        raise prefixed(exc, where) from None
    ctx.made[(record.kind, record.name)] = obj  # what later entries name (a knowledge base's service) is the new one
    record.content_type, record.object_id = ContentType.objects.get_for_model(obj), obj.pk
    record.save(update_fields=["content_type", "object_id"])
    if answered and getattr(obj, "framework", "") == "llm":  # the bases it answered keep answering through its
        from apps.knowledge.models import KnowledgeBase  # replacement

        KnowledgeBase.objects.filter(pk__in=answered, llm_service__isnull=True).update(llm_service=obj)


def _knowledge_bases_answered_by(service: Any) -> list[int]:
    from apps.knowledge.models import KnowledgeBase

    if service is None:
        return []
    return list(KnowledgeBase.objects.filter(llm_service=service).values_list("pk", flat=True))


def resolve_app_version(user: Any, project: Project, app: Any, version: Any = None) -> AppVersion:
    """The version `version` (default the newest) of the app named `app` (or with that id) that `user` sees: the
    project's own app of that name before a public one."""
    visible = App.objects.visible_to(user)
    if isinstance(app, int) or (isinstance(app, str) and app.isdigit()):
        found = visible.filter(pk=int(app)).first()
    else:
        candidates = list(visible.filter(name=str(app or "")))
        found = next((a for a in candidates if a.project_id == project.pk), None) or next(
            (a for a in candidates if a.project_id is None), None
        )
        found = found or (candidates[0] if candidates else None)
    if found is None:
        raise ValidationError({"app": [_("No app “%(app)s” in the catalogue.") % {"app": app}]})
    chosen = found.versions.filter(version=str(version)).first() if version else found.latest
    if chosen is None:
        raise ValidationError({"version": [_("No version “%(v)s” of %(app)s.") % {"v": version, "app": found.name}]})
    return chosen


def import_bundle(data: bytes, project: Project, user: Any, *, visibility: str = App.Visibility.PROJECT) -> AppVersion:
    """A bundle zip uploaded by a project admin as a new version of that project's app of its name."""
    from apps.projects.permissions import CHANGE

    if not has_project_perm(user, project, CHANGE):
        raise PermissionDenied(_("Only a project admin may add apps to the project."))
    if visibility not in (App.Visibility.PROJECT, App.Visibility.PUBLIC):
        raise ValidationError({"visibility": [_("Choose “project” or “public”.")]})
    return add_version(bundles.load_zip(data), project=project, visibility=visibility)
