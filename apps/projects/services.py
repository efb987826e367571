"""Project and membership workflows. Views, the API and commands call these; none re-implements them.

Errors are Django `ValidationError`s keyed by field (pages show them as form errors, the API as
400 with field messages) or `PermissionDenied`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError, Q, RestrictedError
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _

from apps.projects.models import RESERVED_SLUGS, Membership, Project, Quota, Role, slug_validator
from apps.projects.permissions import MANAGE_MEMBERS, TRANSFER, has_project_perm, sync_member_permissions
from portal.lib.errors import Conflict


def validate_new_project(slug: str, name: str, exclude_pk: int | None = None) -> None:
    """Field errors for a project's slug and name (format, reserved words, uniqueness)."""
    errors: dict[str, list[str]] = {}
    if slug is not None:
        try:
            slug_validator(slug)
        except ValidationError as exc:
            errors["slug"] = list(exc.messages)
        else:
            if slug in RESERVED_SLUGS:
                errors["slug"] = [_("“%(slug)s” is reserved; choose another slug.") % {"slug": slug}]
            elif Project.objects.filter(slug=slug).exclude(pk=exclude_pk).exists():
                errors["slug"] = [_("A project with this slug already exists.")]
    if name is not None:
        if not name.strip():
            errors["name"] = [_("A name is required.")]
        elif Project.objects.filter(name__iexact=name.strip()).exclude(pk=exclude_pk).exists():
            errors["name"] = [_("A project with this name already exists.")]
    if errors:
        raise ValidationError(errors)


def create_project(user: Any, **fields: Any) -> Project:
    """Create a project owned by `user` (see `provision_project` for the fields), under the creation policy."""
    if not settings.PORTAL_ALLOW_PROJECT_CREATION and not user.is_staff:
        raise PermissionDenied(_("Only platform administrators can create projects."))
    return provision_project(user, **fields)


def provision_project(
    owner: Any,
    *,
    slug: str,
    name: str,
    description: str = "",
    runtime: str = "",
    notebook_idle_timeout: int | None = None,
) -> Project:
    """Create a project owned by `owner`, with an empty quota, in one transaction. Called as the system (the demo,
    provisioning) no user's creation policy applies; `create_project` is the same under that policy."""
    validate_new_project(slug, name)
    validate_runtime(runtime)
    notebook_idle_timeout = validate_idle_timeout(notebook_idle_timeout, "notebook_idle_timeout")
    try:
        with transaction.atomic():
            project = Project.objects.create(
                slug=slug, name=name.strip(), description=description, created_by=owner, runtime=runtime or "",
                notebook_idle_timeout=notebook_idle_timeout,
            )  # fmt: skip
            Quota.objects.create(project=project)
            _set_role(project, owner, Role.OWNER)
    except IntegrityError:  # a concurrent create won the race for the slug or name
        raise ValidationError({"slug": [_("A project with this slug or name already exists.")]}) from None
    return project


UNCHANGED: Any = object()  # a keyword left out (None is a value for the nullable settings)
MAX_IDLE_TIMEOUT = 7 * 24 * 60  # minutes: a week


def validate_idle_timeout(value: Any, field: str) -> int | None:
    """Minutes (1 to a week) or None; a field error otherwise (notebooks use it for their own timeout too)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IDLE_TIMEOUT:
        raise ValidationError(
            {field: [_("Give a whole number of minutes from 1 to %(max)d.") % {"max": MAX_IDLE_TIMEOUT}]}
        )
    return value


def validate_runtime(runtime: str | None) -> str:
    """ "" (the portal's default), "local" or "kubernetes"; a field error otherwise."""
    if runtime and runtime not in dict(Project._meta.get_field("runtime").choices):
        raise ValidationError({"runtime": [_("Choose the portal default, this machine or Kubernetes.")]})
    return runtime or ""


def update_project(
    project: Project,
    *,
    name: str | None = None,
    description: str | None = None,
    runtime: str | None = None,
    notebook_idle_timeout: int | None = UNCHANGED,
) -> Project:
    if name is not None:
        validate_new_project(None, name, exclude_pk=project.pk)
        project.name = name.strip()
    if description is not None:
        project.description = description
    if runtime is not None:
        project.runtime = validate_runtime(runtime)
    if notebook_idle_timeout is not UNCHANGED:
        project.notebook_idle_timeout = validate_idle_timeout(notebook_idle_timeout, "notebook_idle_timeout")
    project.save(update_fields=["name", "description", "runtime", "notebook_idle_timeout"])
    return project


# How a member hears of a change to their membership: the accounts app, above this one, registers its notifications
# (the navbar's count) from its AppConfig.ready().
Notifier = Callable[[Any, str, str], object]
_notifiers: list[Notifier] = []


def on_member_notice(notifier: Notifier) -> Notifier:
    """Register `notifier(user, message, url)`, told of each change to a user's membership (in their language)."""
    if notifier not in _notifiers:
        _notifiers.append(notifier)
    return notifier


def _notify(user: Any, message: str, url: str) -> None:
    for notifier in _notifiers:
        notifier(user, message, url)


# What higher apps do when a project goes (stop its services, notebooks and running tasks; forget their files):
# registered from their AppConfig.ready(), since this app may not import them. Each hook runs inside the
# deletion's transaction and defers what cannot be rolled back (files, stored bytes) to on_commit.
ProjectDeleteHook = Callable[[Project], None]
_delete_hooks: list[ProjectDeleteHook] = []


def on_project_delete(hook: ProjectDeleteHook) -> ProjectDeleteHook:
    """Register `hook(project)` to run before a project and everything in it is deleted."""
    if hook not in _delete_hooks:
        _delete_hooks.append(hook)
    return hook


def delete_project(project: Project) -> None:
    """Stop and delete everything the project holds, then the project, in one transaction: a refusal anywhere
    (a `Conflict` naming what blocks it) leaves everything as it was."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        for hook in _delete_hooks:
            hook(project)
        try:
            project.delete()
        except (ProtectedError, RestrictedError) as exc:
            raise Conflict.from_protected(exc, project) from None


def find_user(identifier: str) -> Any:
    """A user by username or email (case-insensitive), or a field error on `user`."""
    identifier = (identifier or "").strip()
    User = get_user_model()
    user = User.objects.filter(Q(username__iexact=identifier) | Q(email__iexact=identifier), is_active=True).first()
    if not identifier or user is None:
        raise ValidationError({"user": [_("No active user with username or email “%(id)s”.") % {"id": identifier}]})
    return user


def _set_role(project: Project, user: Any, role: int) -> Membership:
    membership, _created = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    sync_member_permissions(project, user, role)
    return membership


def grant_role(project: Project, user: Any, role: int) -> Membership:
    """The system (the demo repairing its own project) sets a role: no acting user, so no member rules apply."""
    with transaction.atomic():
        return _set_role(project, user, role)


def _require_manager(actor: Any, project: Project, role: int | None, target: Membership | None = None) -> None:
    """Admins manage editors and viewers; only owners grant, change or remove the owner role."""
    if not has_project_perm(actor, project, MANAGE_MEMBERS):
        raise PermissionDenied(_("You cannot manage the members of this project."))
    touches_owner = role == Role.OWNER or (target is not None and target.role == Role.OWNER)
    if touches_owner and not has_project_perm(actor, project, TRANSFER):
        raise PermissionDenied(_("Only an owner can grant, change or remove the owner role."))


def _ensure_another_owner(membership: Membership) -> None:
    if membership.role != Role.OWNER:
        return
    others = Membership.objects.filter(project=membership.project, role=Role.OWNER).exclude(pk=membership.pk)
    if not others.exists():
        raise ValidationError(
            {"role": [_("A project needs at least one owner: transfer ownership before the last owner steps down.")]}
        )


def _members_url(project: Project) -> str:
    return reverse("projects:members", kwargs={"project": project.slug})


def invite_member(project: Project, actor: Any, identifier: str, role: int) -> Membership:
    """Add the user named by username or email to the project with `role`."""
    _require_manager(actor, project, role)
    user = find_user(identifier)
    with transaction.atomic():
        if Membership.objects.select_for_update().filter(project=project, user=user).exists():
            raise ValidationError({"user": [_("%(user)s is already a member of this project.") % {"user": user}]})
        membership = _set_role(project, user, role)
        with translation.override(user.interface_language):  # in the words of the one who reads it
            message = _("%(actor)s added you to %(project)s as %(role)s.") % {
                "actor": actor,
                "project": project.name,
                "role": Role(role).label,
            }
        _notify(user, message, _members_url(project))
    return membership


def change_role(membership: Membership, actor: Any, role: int) -> Membership:
    _require_manager(actor, membership.project, role, membership)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        if role != Role.OWNER:
            _ensure_another_owner(membership)
        membership = _set_role(membership.project, membership.user, role)
        if membership.user != actor:
            with translation.override(membership.user.interface_language):
                message = _("Your role in %(project)s is now %(role)s.") % {
                    "project": membership.project.name,
                    "role": Role(role).label,
                }
            _notify(membership.user, message, _members_url(membership.project))
    return membership


def remove_member(membership: Membership, actor: Any) -> None:
    """Remove a member (a member may always remove themself: that is leaving)."""
    if membership.user != actor:
        _require_manager(actor, membership.project, None, membership)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _ensure_another_owner(membership)
        sync_member_permissions(membership.project, membership.user, None)
        membership.delete()


def leave_project(project: Project, user: Any) -> None:
    membership = Membership.objects.filter(project=project, user=user).first()
    if membership is None:
        raise ValidationError({"user": [_("You are not a member of this project.")]})
    remove_member(membership, user)


def transfer_ownership(project: Project, actor: Any, identifier: str) -> Membership:
    """Make another member the owner; the acting owner stays on as an admin."""
    if not has_project_perm(actor, project, TRANSFER):
        raise PermissionDenied(_("Only an owner can transfer ownership."))
    user = find_user(identifier)
    if user == actor:
        raise ValidationError({"user": [_("You already own this project.")]})
    if not Membership.objects.filter(project=project, user=user).exists():
        raise ValidationError({"user": [_("Ownership can only go to a member of the project.")]})
    with transaction.atomic():
        new_owner = _set_role(project, user, Role.OWNER)
        if Membership.objects.filter(project=project, user=actor).exists():
            _set_role(project, actor, Role.ADMIN)
        with translation.override(user.interface_language):
            message = _("You are now an owner of %(project)s.") % {"project": project.name}
        _notify(user, message, _members_url(project))
    return new_owner
