"""Users, API tokens and notifications."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "mlp_"


class User(AbstractUser):
    """A person (or robot) using the portal. Email is unique when given, so invites may use it.

    `language` is the user's choice of interface language (apps.accounts.middleware applies it to every request);
    empty follows the browser (the language cookie, then Accept-Language).
    """

    language = models.CharField(
        _("language"),
        max_length=10,
        blank=True,
        default="",
        choices=settings.LANGUAGES,
        help_text=_("Empty: the language of the browser."),
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                Lower("email"), condition=~models.Q(email=""), name="accounts_user_email_unique_ci"
            ),
        ]

    def __str__(self) -> str:
        return self.username

    @property
    def interface_language(self) -> str:
        """The language to write to this user in when no request says it (notifications, e-mails)."""
        return self.language or settings.LANGUAGE_CODE


def hash_token(raw: str) -> str:
    """Tokens are 256-bit random strings, so one SHA-256 is enough (no salt or stretching needed)."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """An API token. Only its SHA-256 digest is stored; the raw value is shown once at creation.

    A token may be limited to one project (it then sees nothing else) and to read-only use.
    """

    class Scope(models.TextChoices):
        READ = "read", _("Read")
        WRITE = "write", _("Read and write")

    class Kind(models.TextChoices):
        PERSONAL = "personal", _("Personal")
        WORKLOAD = "workload", _("Minted for a task or notebook")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    project = models.ForeignKey(
        "projects.Project",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text=_("Limit the token to this project."),
    )
    scope = models.CharField(_("scope"), max_length=10, choices=Scope.choices, default=Scope.WRITE)
    kind = models.CharField(
        _("kind"),
        max_length=10,
        choices=Kind.choices,
        default=Kind.PERSONAL,
        help_text=_("Personal: created by its owner. Minted: the platform's own, for one task attempt or notebook."),
    )
    prefix = models.CharField(max_length=12, help_text=_("First characters of the token, to recognise it."))
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def generate() -> str:
        return TOKEN_PREFIX + secrets.token_urlsafe(32)

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def read_only(self) -> bool:
        return self.scope == self.Scope.READ


class Notification(models.Model):
    """A message for one user (e.g. "alice added you to project A"); counted live in the navbar."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    message = models.CharField(max_length=500)
    url = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["user", "read_at"])]

    def __str__(self) -> str:
        return self.message


class SsoMembership(models.Model):
    """Marks a project membership as granted by the single sign-on group mapping (OIDC_GROUP_ROLES).

    Only marked memberships follow the IdP's groups at each login (role changed, membership removed when the
    group is gone); a membership without this marker was granted by a person and SSO never touches it.
    Deleting the membership (by hand or by SSO) deletes the marker with it.
    """

    membership = models.OneToOneField("projects.Membership", on_delete=models.CASCADE, related_name="sso")
    groups = models.CharField(max_length=500, blank=True, help_text=_("The IdP groups that granted the role."))
    synced_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.membership} (from SSO groups {self.groups})"
