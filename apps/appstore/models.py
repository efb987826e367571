"""The catalogue (App, AppVersion) and what an install made in a project (Installation, InstalledObject)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.querysets import TenantQuerySet


class AppQuerySet(models.QuerySet):
    def visible_to(self, user: Any) -> AppQuerySet:
        """Built-in and approved public apps for everyone signed in; a project's own apps for its members."""
        from apps.projects.permissions import projects_for

        if user is None or not user.is_authenticated:
            return self.none()
        mine = projects_for(user).values("pk")
        return self.filter(
            Q(visibility=App.Visibility.PUBLIC, approved=True) | Q(project__in=mine) | Q(shared_with__in=mine)
        ).distinct()


class App(models.Model):
    """A catalogue entry: one app name, its versions, where it comes from and who may see it.

    Built-in apps (`project` empty) come from `fixtures/apps/<name>/`; a project's published apps belong to it and
    are seen by its members (or by everyone once public)."""

    class Visibility(models.TextChoices):
        PUBLIC = "public", _("Everyone (once staff approve it)")
        SHARED = "shared", _("The project and the projects it is shared with")
        PROJECT = "project", _("The project only")

    name = models.CharField(_("name"), max_length=100, validators=[slug_validator])
    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="published_apps"
    )
    visibility = models.CharField(_("visibility"), max_length=20, choices=Visibility.choices)
    builtin = models.BooleanField(_("built in"), default=False)
    # A public app is seen by everyone only once staff approved it (in the admin); built-in apps are approved.
    approved = models.BooleanField(_("approved for everyone"), default=False)
    shared_with = models.ManyToManyField(
        "projects.Project", blank=True, related_name="apps_shared_with", verbose_name=_("shared with projects")
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = AppQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=Q(project__isnull=True), name="appstore_builtin_name"),
            models.UniqueConstraint(fields=["project", "name"], name="appstore_project_app_name"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def latest(self) -> AppVersion | None:
        return self.versions.order_by("-created_at", "-pk").first()


class AppVersion(models.Model):
    """One immutable version of an app: the validated manifest, its README and the bundle's files (a zip), with the
    zip's SHA-256. A new version never changes what is installed from an older one."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(_("version"), max_length=50)
    manifest = models.JSONField(_("manifest"))
    readme = models.TextField(_("README"), blank=True)
    bundle = models.BinaryField(_("bundle (zip)"))
    digest = models.CharField(_("SHA-256 of the bundle"), max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["app", "-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["app", "version"], name="appstore_app_version")]

    def __str__(self) -> str:
        return f"{self.app.name} {self.version}"

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.get("metadata", {})

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifest.get("spec", {})


class Installation(models.Model):
    """An app version installed into a project under a name (the namespace of what it made), with the parameter
    values it was installed with. Its objects list every row the install created."""

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="app_installations")
    name = models.CharField(_("name"), max_length=50, validators=[slug_validator])
    app_version = models.ForeignKey(AppVersion, on_delete=models.PROTECT, related_name="installations")
    parameters = models.JSONField(_("parameters"), default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="appstore_installation_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.app_version})"

    def objects_of(self, kind: str) -> list[Any]:
        return [o.target for o in self.created.filter(kind=kind).order_by("position") if o.target is not None]


class InstalledObject(models.Model):
    """One row an installation created (a dataset, a pipeline, a service…), by a generic reference so that apps
    above the ones known today (labeling projects, knowledge bases) record theirs the same way."""

    installation = models.ForeignKey(Installation, on_delete=models.CASCADE, related_name="created")
    kind = models.CharField(_("kind"), max_length=50)
    name = models.CharField(_("name"), max_length=200)
    position = models.PositiveIntegerField(default=0)
    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE, related_name="+")
    object_id = models.PositiveBigIntegerField()
    target = GenericForeignKey("content_type", "object_id")

    tenant_path = "installation__project"
    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["installation", "position"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
