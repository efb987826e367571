"""Notebook workflows: create, start, stop, restart, delete, and what the runtime reports back.

Errors are `ValidationError`s keyed by field (forms show them, the API answers 400) or `PermissionDenied`.
State changes that race with the runtime's reports (the agent's or controller's thread) are conditional UPDATEs on
(pk, handle, status): a late event of a previous server never touches the current one.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

import requests
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.services import new_task_token
from apps.notebooks import workspace
from apps.notebooks.capacity import place
from apps.notebooks.launch import build_workload
from apps.notebooks.models import Notebook
from apps.projects.events import publish_event
from apps.projects.models import Project, slug_validator
from apps.projects.permissions import CHANGE, CONTRIBUTE, has_project_perm
from apps.projects.services import UNCHANGED, validate_idle_timeout
from apps.runtime.admission import quota_limits, too_large
from apps.runtime.base import get_runtime
from apps.runtime.local.launch import free_port
from apps.runtime.workload import AGENT_SHUT_DOWN, Phase, Status
from portal.lib import sealed
from portal.lib.resources import Resources, parse_memory, read_amount

logger = logging.getLogger(__name__)

State = Notebook.Status
MIN_MEMORY = 128 * 2**20
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
READY_TIMEOUT = 2.0  # seconds for one readiness request


# --- Who may do what (pages and API ask these) ------------------------------------------------------------------


def can_operate(user: Any, notebook: Notebook) -> bool:
    """Open, start, restart, change: the owner, while their role lets them work in the project."""
    return notebook.owner_id == getattr(user, "pk", None) and has_project_perm(user, notebook.project, CONTRIBUTE)


def can_stop(user: Any, notebook: Notebook) -> bool:
    """Stop or delete: the owner, or an admin of the project (someone else's notebook holding a GPU)."""
    return can_operate(user, notebook) or has_project_perm(user, notebook.project, CHANGE)


def require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied(_("Only the notebook's owner (or, to stop or delete it, a project admin) may do this."))


# --- Create and change ------------------------------------------------------------------------------------------


MAX_AMOUNT = Decimal(1000)


def _column_max(field: str) -> Decimal:
    """The largest amount the notebook's decimal column `field` holds (gpu: 999.99): past it PostgreSQL refuses
    the row ("numeric field overflow", a 500)."""
    column = Notebook._meta.get_field(field)
    return Decimal(10) ** (column.max_digits - column.decimal_places) - Decimal(10) ** -column.decimal_places


def _resources(cpu: Any, memory: Any, gpu: Any, errors: dict[str, list[str]]) -> tuple[Decimal, int, Decimal]:
    def number(value: Any, field: str, minimum: Decimal) -> Decimal:
        maximum = min(MAX_AMOUNT, _column_max(field).to_integral_value(rounding=ROUND_FLOOR))
        try:
            result = read_amount(value).quantize(Decimal("0.01"))  # "0.5", "500m": as pipeline nodes read it
        except (InvalidOperation, ValueError):
            errors[field] = [_("Give a number.")]
            return Decimal(0)
        if not result.is_finite() or result < minimum or result > maximum:
            errors[field] = [_("Give a number from %(min)s to %(max)s.") % {"min": minimum, "max": maximum}]
        return result

    cpu_value = number(cpu, "cpu", Decimal("0.1"))
    gpu_value = number(gpu, "gpu", Decimal(0))
    if "gpu" not in errors and gpu_value != gpu_value.to_integral_value():
        errors["gpu"] = [_("Give a whole number of GPUs.")]
    try:
        memory_bytes = parse_memory(memory) or 0
    except ValueError:
        errors["memory"] = [_("Give a size such as 512Mi, 4Gi or a number of bytes.")]
        memory_bytes = 0
    if "memory" not in errors and memory_bytes < MIN_MEMORY:
        errors["memory"] = [_("Give at least 128Mi.")]
    elif "memory" not in errors and memory_bytes > 2**50:
        errors["memory"] = [_("Give at most 1Pi.")]
    return cpu_value, memory_bytes, gpu_value


def _quota_errors(project: Project, cpu: Decimal, memory_bytes: int, gpu: Decimal) -> dict[str, list[str]]:
    """A notebook that alone asks for more than the project's quota can never start."""
    errors = too_large(Resources.of(cpu, memory_bytes, gpu), quota_limits(project))
    return {name: [message] for name, message in errors.items()}


def _check_ide(ide: str, errors: dict[str, list[str]]) -> None:
    if ide not in Notebook.Ide.values:
        errors["ide"] = [_("Choose JupyterLab or VS Code.")]
    elif ide == Notebook.Ide.VSCODE and not code_server_available():
        errors["ide"] = [_("code-server is not installed on this portal (an administrator sets PORTAL_CODE_SERVER).")]


def code_server_available() -> bool:
    path = settings.PORTAL_CODE_SERVER
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def _check_image(image: str, errors: dict[str, list[str]]) -> str:
    image = (image or "").strip()
    if image and (len(image) > 200 or not _IMAGE_RE.match(image)):
        errors["image"] = [_("Give an image reference such as quay.io/jupyter/scipy-notebook:latest.")]
    return image


def create_notebook(
    project: Project,
    owner: Any,
    *,
    name: str,
    ide: str = Notebook.Ide.JUPYTERLAB,
    image: str = "",
    cpu: Any = 1,
    memory: Any = "2Gi",
    gpu: Any = 0,
    idle_timeout: Any = None,
) -> Notebook:
    """A stopped notebook of `owner` in `project` (start it with `start_notebook`)."""
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    try:
        slug_validator(name)
    except ValidationError as exc:
        errors["name"] = list(exc.messages)
    else:
        if Notebook.objects.filter(project=project, owner=owner, name=name).exists():
            errors["name"] = [_("You already have a notebook named “%(name)s” in this project.") % {"name": name}]
    _check_ide(ide, errors)
    image = _check_image(image, errors)
    cpu_value, memory_bytes, gpu_value = _resources(cpu, memory, gpu, errors)
    try:
        timeout = validate_idle_timeout(idle_timeout, "idle_timeout")
    except ValidationError as exc:
        errors.update(exc.message_dict)
        timeout = None
    if not errors:
        errors.update(_quota_errors(project, cpu_value, memory_bytes, gpu_value))
    if errors:
        raise ValidationError(errors)
    return Notebook.objects.create(
        project=project, owner=owner, name=name, ide=ide, image=image,
        cpu=cpu_value, memory_bytes=memory_bytes, gpu=gpu_value, idle_timeout=timeout,
    )  # fmt: skip


def update_notebook(
    notebook: Notebook,
    *,
    image: Any = UNCHANGED,
    cpu: Any = UNCHANGED,
    memory: Any = UNCHANGED,
    gpu: Any = UNCHANGED,
    idle_timeout: Any = UNCHANGED,
) -> Notebook:
    """Change settings; resources and image apply at the next start, the idle timeout at once."""
    errors: dict[str, list[str]] = {}
    fields: dict[str, Any] = {}
    if image is not UNCHANGED:
        fields["image"] = _check_image(image, errors)
    if {cpu, memory, gpu} != {UNCHANGED}:
        cpu_value, memory_bytes, gpu_value = _resources(
            notebook.cpu if cpu is UNCHANGED else cpu,
            notebook.memory_bytes if memory is UNCHANGED else memory,
            notebook.gpu if gpu is UNCHANGED else gpu,
            errors,
        )
        fields.update(cpu=cpu_value, memory_bytes=memory_bytes, gpu=gpu_value)
        if not errors:
            errors.update(_quota_errors(notebook.project, cpu_value, memory_bytes, gpu_value))
    if idle_timeout is not UNCHANGED:
        try:
            fields["idle_timeout"] = validate_idle_timeout(idle_timeout, "idle_timeout")
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    for key, value in fields.items():
        setattr(notebook, key, value)
    if fields:
        notebook.save(update_fields=list(fields))
    return notebook


# --- Start ------------------------------------------------------------------------------------------------------


def start_notebook(notebook: Notebook) -> Notebook:
    """Start the server (idempotent: a starting or running notebook is returned as it is)."""
    with transaction.atomic():
        locked = Notebook.objects.select_for_update(of=("self",))  # not the nullable quota of the outer join
        nb = locked.select_related("project__quota", "owner").get(pk=notebook.pk)
        if nb.status in (State.STARTING, State.RUNNING):
            return nb
        if nb.status == State.STOPPING:
            raise ValidationError(_("The notebook is still stopping; start it again in a moment."))
        errors: dict[str, list[str]] = {}
        _check_ide(nb.ide, errors)
        if errors:
            raise ValidationError(errors)
        placement = place(nb)
        home = workspace.prepare(nb.project, nb.owner)
        # Both tokens are sealed references in the stored workload (portal/lib/sealed.py): the server's own is kept
        # encrypted on the notebook (the proxy sends it), the API token's digest in the tokens table.
        token_ref, token = sealed.new()
        api_token, api_ref = new_task_token(
            nb.owner,
            name=f"notebook {nb.project.slug}/{nb.name}",
            project=nb.project,
            days=settings.PORTAL_NOTEBOOK_TOKEN_DAYS,
        )
        api_token.save()
        nb.session += 1
        runtime = get_runtime(placement.runtime)
        port = 0 if runtime.on_cluster else free_port()  # a pod listens on its own fixed port
        workload, upstream = build_workload(nb, placement, home=home, port=port, token=token_ref, api_token=api_ref)
        handle = runtime.submit(workload)
        now = timezone.now()
        nb.status, nb.reason, nb.runtime, nb.handle = State.STARTING, "", placement.runtime, handle
        nb.upstream, nb.token, nb.api_token = upstream, token, api_token
        nb.started_at, nb.stopped_at, nb.last_activity, nb.idle_warned_at, nb.seen_activity = (
            now,
            None,
            None,
            None,
            None,
        )
        nb.log_tail = ""
        nb.save()
        transaction.on_commit(lambda: publish_status(nb))
    return nb


# --- Stop, restart, delete --------------------------------------------------------------------------------------


def stop_notebook(notebook: Notebook, reason: str = "") -> Notebook:
    """Stop the server (its whole process tree, or its pod); the files stay. Idempotent."""
    with transaction.atomic():
        nb = Notebook.objects.select_for_update().get(pk=notebook.pk)
        if nb.status not in (State.STARTING, State.RUNNING):
            return nb
        get_runtime(nb.runtime).cancel(nb.handle)
        revoke_api_token(nb)
        nb.status, nb.reason = State.STOPPING, reason
        nb.save(update_fields=["status", "reason", "api_token"])
        transaction.on_commit(lambda: publish_status(nb))
    # A workload no agent had claimed yet is cancelled at once, and nobody will report it: record the end here.
    status = get_runtime(nb.runtime).poll(nb.handle)
    if status.phase.finished:
        record_end(nb.pk, nb.handle, status.phase, status)
        nb.refresh_from_db()
    return nb


def restart_notebook(notebook: Notebook) -> Notebook:
    """A new server (new port and token) on the same files; the old one is stopped."""
    nb = stop_notebook(notebook)
    if nb.status == State.STOPPING:
        # The old server is going away on its own: the new one is another workload, and its events are told apart
        # by the handle, so it need not wait.
        Notebook.objects.filter(pk=nb.pk, status=State.STOPPING).update(status=State.STOPPED)
    return start_notebook(nb)


def delete_notebook(notebook: Notebook) -> None:
    """Stop it and forget it; the owner's files stay in their folder (other notebooks of theirs use it too)."""
    stop_notebook(notebook)
    Notebook.objects.filter(pk=notebook.pk).delete()
    gone = {"status": "deleted", "reason": "", "last_activity": None}
    transaction.on_commit(lambda: publish_event(notebook.project_id, "notebook", notebook.pk, **gone))


def delete_project_notebooks(project: Project) -> None:
    """A project is being deleted (inside its transaction): every notebook stops and goes; once that commits, the
    project's folders go too (homes and shared), so a later project with the same slug starts empty."""
    for notebook in Notebook.objects.filter(project=project):
        delete_notebook(notebook)
    folder = workspace.project_dir(project)
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


def revoke_api_token(nb: Notebook) -> None:
    if nb.api_token_id is not None:
        from apps.accounts.models import ApiToken

        ApiToken.objects.filter(pk=nb.api_token_id, revoked_at__isnull=True).update(revoked_at=timezone.now())


# --- What the runtime reports -----------------------------------------------------------------------------------


def ready(nb: Notebook) -> bool:
    """Whether the server answers its status endpoint with the token (one request)."""
    if not nb.upstream or not nb.token:
        return False
    try:
        response = requests.get(
            f"{nb.upstream}{nb.base_path}api/status",
            headers={"Authorization": f"token {nb.token}"},
            timeout=READY_TIMEOUT,
        )
    except requests.RequestException:
        return False
    return response.status_code == 200


def mark_running(pk: int, handle: str) -> bool:
    now = timezone.now()
    changed = Notebook.objects.filter(pk=pk, handle=handle, status=State.STARTING).update(
        status=State.RUNNING, last_activity=now
    )
    if changed:
        publish_status(Notebook.objects.get(pk=pk))
    return bool(changed)


_ERROR_LINE = re.compile(r"(Error|Exception|error:|\[E |\[C |No such file|not found|denied)", re.IGNORECASE)


def meaningful_line(log_tail: str) -> str:
    """The last line of the log that says what went wrong ("" when none does)."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    for line in reversed(lines[-30:]):
        if _ERROR_LINE.search(line):
            return line[:300]
    return ""


def record_end(pk: int, handle: str, phase: Phase, status: Status | None = None) -> None:
    """The server `handle` of notebook `pk` ended: stopped when asked (or shut down from inside); started again when
    its agent died or shut down under it (see `restart_lost`); else failed."""
    nb = Notebook.objects.filter(pk=pk, handle=handle).first()
    if nb is None or nb.status in (State.STOPPED, State.FAILED):
        return
    code = status.exit_code if status is not None else None
    why = (status.reason if status is not None else "") or phase.value
    if nb.status == State.STOPPING or (phase == Phase.CANCELLED and why != AGENT_SHUT_DOWN):
        new, reason = State.STOPPED, nb.reason
    elif phase == Phase.LOST or phase == Phase.CANCELLED:  # its agent died, or shut down under it
        restart_lost(nb, why)
        return
    elif phase == Phase.SUCCEEDED:
        new, reason = State.STOPPED, _("the server was shut down from inside (exit code 0)")
    else:
        what = (status.reason if status is not None else "") or phase.value
        line = meaningful_line(nb.log_tail)
        new, reason = State.FAILED, f"{what}: {line}" if line else what
        if code is not None and str(code) not in what:
            reason = f"{reason} (exit code {code})"
    changed = Notebook.objects.filter(pk=pk, handle=handle, status=nb.status).update(
        status=new, reason=reason[:2000], stopped_at=timezone.now(), upstream="", token=None
    )
    if changed:
        revoke_api_token(nb)
        nb.refresh_from_db()
        publish_status(nb)


def restart_lost(nb: Notebook, why: str) -> Notebook:
    """A server lost with its agent (an infrastructure event, not the notebook's doing): the user wanted it running,
    so a new server starts on the same files (it waits for an agent if none runs now: the start timeout then says
    so). When it cannot start (quota, capacity, the IDE gone), the notebook fails saying why."""
    lost = _("its server was lost with its agent (%(why)s)") % {"why": why}
    changed = Notebook.objects.filter(pk=nb.pk, handle=nb.handle, status=nb.status).update(
        status=State.STOPPED, reason=lost[:2000], stopped_at=timezone.now(), upstream="", token=None
    )
    if not changed:
        return nb  # another event or a user moved it meanwhile
    revoke_api_token(nb)
    nb.refresh_from_db()
    try:
        nb = start_notebook(nb)
    except ValidationError as exc:
        reason = _("%(lost)s; not restarted: %(why)s") % {"lost": lost, "why": " ".join(exc.messages)}
        Notebook.objects.filter(pk=nb.pk, status=State.STOPPED).update(status=State.FAILED, reason=reason[:2000])
        nb.refresh_from_db()
        publish_status(nb)
        return nb
    nb.reason = (_("Restarted: %(lost)s") % {"lost": lost})[:2000]
    Notebook.objects.filter(pk=nb.pk, handle=nb.handle).update(reason=nb.reason)
    publish_status(nb)
    logger.info("notebook %s: %s", nb.pk, nb.reason)
    return nb


def server_started(pk: int, handle: str) -> None:
    """The process (or pod) is up: wait for the server to answer, on a worker."""
    if not Notebook.objects.filter(pk=pk, handle=handle, status=State.STARTING).exists():
        return
    from apps.notebooks.tasks import await_ready

    try:
        await_ready.delay(pk, handle)
    except Exception:  # the broker is down: the culler's repair pass checks starting notebooks too
        logger.warning("could not queue the readiness check of notebook %s", pk, exc_info=True)


def publish_status(nb: Notebook) -> None:
    """Tell the project's open pages (list and notebook page, over its events socket) how the notebook is now."""
    publish_event(
        nb.project_id,
        "notebook",
        nb.pk,
        status=nb.status,
        reason=nb.reason,
        last_activity=nb.last_activity.isoformat() if nb.last_activity else None,
    )


def page_url(nb: Notebook) -> str:
    return reverse("notebooks:notebook-detail", kwargs={"project": nb.project.slug, "pk": nb.pk})
