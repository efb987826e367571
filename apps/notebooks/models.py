"""A notebook server: who owns it, what it runs with, and the state the runtime last reported."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.models import slug_validator
from apps.projects.querysets import TenantQuerySet
from portal.lib.fields import EncryptedText
from portal.lib.resources import Resources


class Notebook(models.Model):
    """A JupyterLab (or VS Code) server of one user in one project.

    Its files live in the owner's folder of the project (and the project's shared folder is mounted beside it),
    so stopping a notebook — by hand or by the idle culler — never loses work. Only the owner opens it, and only
    through the portal's proxy at `/notebook/<pk>/`: the server itself listens on loopback (local runtime) or a
    cluster-internal Service (Kubernetes) with a random token the browser never sees.
    """

    class Ide(models.TextChoices):
        JUPYTERLAB = "jupyterlab", _("JupyterLab")
        VSCODE = "vscode", _("VS Code (code-server)")

    class Status(models.TextChoices):
        STOPPED = "stopped", _("Stopped")
        STARTING = "starting", _("Starting")
        RUNNING = "running", _("Running")
        STOPPING = "stopping", _("Stopping")
        FAILED = "failed", _("Failed")

    ACTIVE = (Status.STARTING, Status.RUNNING, Status.STOPPING)

    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="notebooks")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notebooks")
    name = models.CharField(_("name"), max_length=50, validators=[slug_validator])
    ide = models.CharField(_("IDE"), max_length=20, choices=Ide.choices, default=Ide.JUPYTERLAB)
    # The container image on a cluster ("" = the portal's notebook image); the local runtime records it only.
    image = models.CharField(_("image"), max_length=200, blank=True)
    cpu = models.DecimalField(
        _("CPU cores"), max_digits=6, decimal_places=2, default=1, validators=[MinValueValidator(0)]
    )
    memory_bytes = models.BigIntegerField(_("memory (bytes)"), default=2 * 1024**3, validators=[MinValueValidator(0)])
    gpu = models.DecimalField(_("GPUs"), max_digits=5, decimal_places=2, default=0, validators=[MinValueValidator(0)])
    # Minutes without kernel or terminal activity before the culler stops it; null = the project's default.
    idle_timeout = models.PositiveIntegerField(_("idle timeout (minutes)"), null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    # What the runtime last said, and what the proxy needs to reach the server.
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.STOPPED)
    reason = models.TextField(_("reason"), blank=True)
    runtime = models.CharField(max_length=20, blank=True)  # where the current/last server runs: local | kubernetes
    handle = models.CharField(max_length=200, blank=True)  # the runtime's handle of the current workload
    upstream = models.CharField(max_length=200, blank=True)  # "http://127.0.0.1:41234" (base URL, no path)
    token = EncryptedText(null=True, blank=True)  # the server's random token ("" stored as NULL)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    last_activity = models.DateTimeField(_("last activity"), null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)  # when the owner was told it will be stopped
    # The newest kernel/terminal activity the server itself reported, on the server's clock: the culler compares
    # it with the previous pass's to tell that something happened since, whatever that clock says (a pod's drifts).
    seen_activity = models.DateTimeField(null=True, blank=True)
    log_tail = models.TextField(blank=True)  # the server's last lines, kept for the page (and the failure reason)
    # Counts starts: each server is a new workload (`workload_uid`), so a late event of the previous one is told apart.
    session = models.PositiveIntegerField(default=0)
    # The short-lived project token injected as PORTAL_API_TOKEN / MLFLOW_TRACKING_TOKEN; revoked when it stops.
    api_token = models.ForeignKey(
        "accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["project", "owner", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "owner", "name"], name="notebooks_notebook_unique_name")
        ]
        indexes = [models.Index(fields=["status"], name="notebooks_status_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.owner})"

    @property
    def resources(self) -> Resources:
        """What the notebook's server asks for."""
        return Resources.of(self.cpu, self.memory_bytes, self.gpu)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def workload_uid(self) -> str:
        return f"notebook-{self.pk}-{self.session}"

    @property
    def open_path(self) -> str:
        """Where the browser opens it (through the proxy)."""
        return f"{self.base_path}lab" if self.ide == self.Ide.JUPYTERLAB else self.base_path

    @property
    def base_path(self) -> str:
        """The proxied path prefix; the server runs with this as its base URL, so its links need no rewriting."""
        return f"/notebook/{self.pk}/"
