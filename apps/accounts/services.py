"""Tokens and notifications: creation, revocation, authentication and the live unread count."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import ApiToken, Notification, SsoMembership, hash_token
from apps.projects.models import Membership, Project, Role
from apps.projects.permissions import has_project_perm, sync_member_permissions
from portal.lib import sealed
from portal.lib.publish import publish

logger = logging.getLogger(__name__)

# Record last use at most this often per token: a busy client must not turn reads into writes.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def create_token(
    user: Any,
    *,
    name: str,
    project: Any = None,
    scope: str = ApiToken.Scope.WRITE,
    days: int | None = None,
    expires_at: datetime | None = None,
    via: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Create a token and return it with its raw value, which is not stored and cannot be shown again.

    `via` is the token the request came with, if any: the new token may not be broader than it (other
    projects, write access, a longer life), or a limited token could mint itself an unlimited one.
    """
    errors: dict[str, list[str]] = {}
    if not (name or "").strip():
        errors["name"] = [_("A name is required.")]
    if scope not in ApiToken.Scope.values:
        errors["scope"] = [_("Scope must be one of: %(choices)s.") % {"choices": ", ".join(ApiToken.Scope.values)}]
    now = timezone.now()
    max_days = settings.PORTAL_TOKEN_MAX_DAYS
    if days is not None and expires_at is not None:
        errors["expires_at"] = [_("Give either days or expires_at, not both.")]
    elif days is not None and not 1 <= days <= max_days:
        errors["days"] = [_("Expiry must be between 1 and %(max)d days.") % {"max": max_days}]
    elif expires_at is not None and not now < expires_at <= now + timedelta(days=max_days):
        errors["expires_at"] = [
            _("The expiry must be in the future and at most %(max)d days away.") % {"max": max_days}
        ]
    elif days is not None:
        expires_at = now + timedelta(days=days)
    if project is not None and not has_project_perm(user, project, "view_project"):
        errors["project"] = [_("You are not a member of this project.")]
    if via is not None:
        lifetime_field = "expires_at" if days is None and expires_at is not None else "days"
        for field, messages in _broader_than(via, project=project, scope=scope, expires_at=expires_at).items():
            errors.setdefault(lifetime_field if field == "expires_at" else field, messages)
    if errors:
        raise ValidationError(errors)
    raw = ApiToken.generate()
    token = ApiToken.objects.create(
        user=user,
        name=name.strip(),
        project=project,
        scope=scope,
        prefix=raw[:12],
        digest=hash_token(raw),
        expires_at=expires_at,
    )
    return token, raw


def new_task_token(user: Any, *, name: str, project: Any, days: int) -> tuple[ApiToken, str]:
    """(an unsaved project-scoped token for a workload the portal starts on `user`'s behalf, the reference to put in
    the workload's env in its place). The caller saves the token, often in bulk. No checks: the run was authorised
    when it started, and every request made with the token is authorised again.

    The raw value is sealed (portal/lib/sealed.py): stored nowhere, derived again where the workload starts; the
    tokens table keeps its digest, as for every token."""
    reference, raw = sealed.new()
    token = ApiToken(
        user=user,
        name=name,
        project=project,
        scope=ApiToken.Scope.WRITE,
        kind=ApiToken.Kind.WORKLOAD,
        prefix=raw[:8],  # as much as a generated token's prefix shows (after mlp_)
        digest=hash_token(raw),
        expires_at=timezone.now() + timedelta(days=days),
    )
    return token, reference


def _broader_than(via: ApiToken, *, project: Any, scope: str, expires_at: datetime | None) -> dict[str, list[str]]:
    """Field errors for each way a token created with `via` would reach further than `via` itself."""
    errors: dict[str, list[str]] = {}
    if via.project_id is not None and getattr(project, "pk", None) != via.project_id:
        errors["project"] = [_("This token is limited to one project; it can only create tokens for that project.")]
    if via.read_only and scope != ApiToken.Scope.READ:
        errors["scope"] = [_("This token is read-only; it can only create read-only tokens.")]
    if via.expires_at is not None and (expires_at is None or expires_at > via.expires_at):
        errors["expires_at"] = [_("This token expires; it cannot create a token that outlives it.")]
    return errors


def revoke_token(token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def authenticate_token(raw: str) -> ApiToken | None:
    """The active token with this raw value, or None (unknown, revoked, expired or inactive user)."""
    token = ApiToken.objects.active().select_related("user").filter(digest=hash_token(raw)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def purge_expired_tokens(older_than_days: int = 30) -> int:
    """Delete tokens that expired or were revoked more than `older_than_days` ago."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    deleted, _details = ApiToken.objects.filter(expires_at__lt=cutoff).delete()
    revoked, _details = ApiToken.objects.filter(revoked_at__lt=cutoff).delete()
    return deleted + revoked


def user_group(user_id: int) -> str:
    return f"accounts.user.{user_id}"


def unread_count(user: Any) -> int:
    return Notification.objects.filter(user=user, read_at__isnull=True).count()


def publish_unread_count(user_id: int) -> None:
    """Push the user's unread count to their open websockets."""
    count = Notification.objects.filter(user_id=user_id, read_at__isnull=True).count()
    try:
        publish(user_group(user_id), {"type": "unread.count", "unread": count})
    except Exception:  # the notification is stored; the badge catches up on the next page load
        logger.warning("could not publish the unread count of user %s", user_id, exc_info=True)


def notify(user: Any, message: str, url: str = "") -> Notification:
    """Store a notification and, once the transaction commits, update the user's live count."""
    notification = Notification.objects.create(user=user, message=message[:500], url=url)
    transaction.on_commit(lambda: publish_unread_count(user.pk))
    return notification


def mark_read(user: Any, ids: list[int] | None = None) -> int:
    qs = Notification.objects.filter(user=user, read_at__isnull=True)
    if ids is not None:
        qs = qs.filter(pk__in=ids)
    changed = qs.update(read_at=timezone.now())
    if changed:
        transaction.on_commit(lambda: publish_unread_count(user.pk))
    return changed


def sync_sso_memberships(user: Any, groups: list[str], mapping: dict[str, list[tuple[str, int]]]) -> dict[str, int]:
    """Make the user's SSO-granted memberships match their IdP `groups` under `mapping`
    ({group: [(project slug, role), …]}) and return {project slug: role} of what SSO now grants.

    Granted, upgraded, downgraded or removed here only when marked as SSO-granted (`SsoMembership`): a
    membership a person granted is never touched, even when a group maps to the same project. Several groups
    mapping to one project give the highest of their roles. Guardian grants follow through
    `sync_member_permissions`, in the same transaction. A project's last owner is never demoted or removed.
    """
    wanted: dict[str, tuple[int, list[str]]] = {}
    for group in sorted(set(groups)):
        for slug, role in mapping.get(group, []):
            best, sources = wanted.get(slug, (0, []))
            wanted[slug] = (max(best, role), [*sources, group])
    projects = {p.slug: p for p in Project.objects.filter(slug__in=wanted)}
    for slug in wanted.keys() - projects.keys():
        logger.warning("OIDC_GROUP_ROLES names project %r, which does not exist; skipped", slug)

    granted: dict[str, int] = {}
    with transaction.atomic():
        current = {
            m.project.slug: m
            for m in Membership.objects.select_for_update(of=("self",))
            .select_related("project", "sso")
            .filter(user=user)
        }
        for slug, project in projects.items():
            role, sources = wanted[slug]
            membership = current.get(slug)
            if membership is not None and not hasattr(membership, "sso"):
                continue  # granted by a person: theirs to change
            demotes_owner = membership is not None and membership.role == Role.OWNER and role != Role.OWNER
            if demotes_owner and _last_owner(membership):
                logger.warning("SSO keeps %s the owner of %s: no other owner", user, slug)
                continue
            membership, _created = Membership.objects.update_or_create(
                project=project, user=user, defaults={"role": role}
            )
            sync_member_permissions(project, user, role)
            SsoMembership.objects.update_or_create(
                membership=membership, defaults={"groups": ",".join(sources)[:500], "synced_at": timezone.now()}
            )
            granted[slug] = role
        for slug, membership in current.items():
            if slug in projects or not hasattr(membership, "sso"):
                continue
            if membership.role == Role.OWNER and _last_owner(membership):
                logger.warning("SSO keeps %s the owner of %s: no other owner", user, slug)
                continue
            sync_member_permissions(membership.project, user, None)
            membership.delete()  # the marker goes with it (cascade)
    return granted


def _last_owner(membership: Any) -> bool:
    return (
        not Membership.objects.filter(project_id=membership.project_id, role=Role.OWNER)
        .exclude(pk=membership.pk)
        .exists()
    )
