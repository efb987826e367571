"""Projects (the tenant), memberships with roles, quotas, and guardian's per-project permission rows."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from guardian.models import GroupObjectPermissionBase, UserObjectPermissionBase

from apps.projects.querysets import TenantQuerySet
from portal.lib.fields import EncryptedText
from portal.lib.resources import UNLIMITED, Resources, Shortfall

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,48}[a-z0-9])?$",
    _("Use 1–50 lowercase letters, digits and hyphens, starting and ending with a letter or digit."),
    code="invalid_slug",
)

RESERVED_SLUGS = frozenset({"new", "api", "admin", "static", "media", "ws", "settings"})


class Role(models.IntegerChoices):
    """Membership roles, ordered: each role can do everything the roles below it can."""

    VIEWER = 10, _("Viewer")
    EDITOR = 20, _("Editor")
    ADMIN = 30, _("Admin")
    OWNER = 40, _("Owner")

    @classmethod
    def from_name(cls, name: str) -> Role:
        return cls[name.upper()]

    @property
    def slug(self) -> str:
        return self.name.lower()


class Project(models.Model):
    """The tenant: everything a team works on lives in exactly one project."""

    slug = models.CharField(_("slug"), max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")
    # Where the project's tasks run: "" follows PORTAL_RUNTIME; "kubernetes" uses the clusters bound to the
    # project (apps.runtime.models.ProjectCluster), the default binding first.
    runtime = models.CharField(
        _("runtime"),
        max_length=20,
        blank=True,
        choices=[("", _("portal default")), ("local", _("this machine")), ("kubernetes", _("Kubernetes"))],
    )
    # Minutes a notebook of the project may sit idle before it is stopped (a notebook may set its own);
    # null = PORTAL_NOTEBOOK_IDLE_TIMEOUT (PORTAL_NOTEBOOK_GPU_IDLE_TIMEOUT for notebooks with GPUs).
    notebook_idle_timeout = models.PositiveIntegerField(_("notebook idle timeout (minutes)"), null=True, blank=True)

    objects = TenantQuerySet.as_manager()
    tenant_path = "pk"

    class Meta:
        ordering = ["name", "pk"]
        constraints = [models.UniqueConstraint(Lower("name"), name="projects_project_name_unique_ci")]
        permissions = [
            ("contribute_project", _("Create and change objects in the project")),
            ("manage_members", _("Invite, change and remove members")),
            ("transfer_project", _("Transfer ownership of the project")),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def project(self) -> Project:
        return self


class Membership(models.Model):
    """A user's role in a project; the source from which object permissions are granted."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.PositiveSmallIntegerField(_("role"), choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-role", "user__username"]
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="projects_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} — {self.get_role_display()} of {self.project}"

    def get_role_slug(self) -> str:
        return Role(self.role).slug


class Quota(models.Model):
    """Resource limits of a project, checked when work is submitted and when the queue dispatches.

    Null means "no limit".
    """

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="quota")
    cpu_cores = models.DecimalField(_("CPU cores"), max_digits=8, decimal_places=2, null=True, blank=True)
    memory_bytes = models.BigIntegerField(_("memory (bytes)"), null=True, blank=True)
    gpus = models.DecimalField(_("GPUs"), max_digits=6, decimal_places=2, null=True, blank=True)
    # Runs in flight (started and not finished) and, apart from them, tasks queued or running at once.
    concurrent_runs = models.PositiveIntegerField(_("concurrent runs"), null=True, blank=True)
    concurrent_tasks = models.PositiveIntegerField(_("concurrent tasks"), null=True, blank=True)
    storage_bytes = models.BigIntegerField(_("storage (bytes)"), null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    def __str__(self) -> str:
        return f"Quota of {self.project}"

    @property
    def limits(self) -> Resources:
        """The CPU cores, memory and GPUs the project may hold at once (`UNLIMITED` where the quota sets none)."""
        return Resources.of(
            UNLIMITED if self.cpu_cores is None else self.cpu_cores,
            UNLIMITED if self.memory_bytes is None else self.memory_bytes,
            UNLIMITED if self.gpus is None else self.gpus,
        )

    @property
    def limits_anything(self) -> bool:
        """Whether any limit is set (else nothing the project holds needs counting)."""
        limits = (self.cpu_cores, self.memory_bytes, self.gpus, self.concurrent_runs, self.concurrent_tasks)
        return any(limit is not None for limit in limits)

    def what_would_exceed(self, request: Resources, in_use: Resources | None = None) -> list[Shortfall]:
        """What `request` on top of `in_use` (what the project holds; nothing when absent) would take past this
        quota, scarcest first (GPUs, CPU, memory); each says so in words (`str()`): "1 GPU — quota 1/1 in use"."""
        in_use = in_use or Resources.none()
        limits = self.limits
        return [
            Shortfall(name, request.amount(name), in_use.amount(name), limits.amount(name), _("quota"))
            for name in limits.exceeded_by(request + in_use)
            if request.amount(name)
        ]

    def room_for(self, request: Resources, in_use: Resources) -> int:
        """How many more of `request` the quota takes after `in_use` (a large number when nothing it asks for is
        limited)."""
        return request.times_within(self.limits - in_use)


# Env-var style; the portal's own variables (PORTAL_*, MLFLOW_*) cannot be shadowed by a secret's name.
secret_name_validator = RegexValidator(
    r"^(?!PORTAL_|MLFLOW_)[A-Z_][A-Z0-9_]*$",
    _("Use capital letters, digits and underscores, not starting with a digit, PORTAL_ or MLFLOW_."),
    code="invalid_secret_name",
)


class ProjectSecret(models.Model):
    """A value a project's tasks may receive as an env var (apps/projects/secrets.py): encrypted at rest with the
    shared helper, written but never shown back (pages, API and admin show the name and description only)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(_("name"), max_length=100, validators=[secret_name_validator])
    value = EncryptedText(_("value"), null=True)
    description = models.CharField(_("description"), max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="projects_secret_name_unique")]

    def __str__(self) -> str:
        return self.name


class ProjectUserObjectPermission(UserObjectPermissionBase):
    """guardian's direct foreign key table: fast joins instead of generic string object ids."""

    content_object = models.ForeignKey(Project, on_delete=models.CASCADE)


class ProjectGroupObjectPermission(GroupObjectPermissionBase):
    content_object = models.ForeignKey(Project, on_delete=models.CASCADE)
