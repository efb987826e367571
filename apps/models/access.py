"""Who is calling the tracking API and what they may reach: the MLflow API's tenant choke point.

A `Caller` answers, per request, the projects its user can see and write in (one query each, then cached),
narrowed to the token's project. Objects outside them do not exist (RESOURCE_DOES_NOT_EXIST, 404);
visible but not writable is PERMISSION_DENIED (403), as for the rest of the portal.

Project of new experiments and registered models: the token's project; for a token without a project
(or a browser session) the `X-Portal-Project: <slug>` header, or a name of the form `<project-slug>/<name>`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import ApiToken, hash_token
from apps.accounts.services import authenticate_token
from apps.models.errors import Forbidden, InvalidParameter, NotFound
from apps.projects.models import Project, ProjectGroupObjectPermission, ProjectUserObjectPermission
from apps.projects.permissions import CONTRIBUTE, VIEW


def load_grants(user: Any, token: ApiToken | None) -> dict[str, dict[int, str]]:
    """{perm: {project id: slug}} for VIEW and CONTRIBUTE in ONE query on guardian's direct tables.

    The same answer as `projects_for(user, perm)` (user and group grants, superusers everything,
    inactive users nothing) — which costs two guardian queries per permission: at hundreds of
    logging calls a second that was most of a request's time.
    """
    grants: dict[str, dict[int, str]] = {VIEW: {}, CONTRIBUTE: {}}
    if getattr(user, "is_authenticated", False) and user.is_active:
        if user.is_superuser:
            rows = [(pk, perm, slug) for pk, slug in Project.objects.values_list("pk", "slug") for perm in grants]
        else:
            wanted = {"permission__codename__in": list(grants), "permission__content_type__app_label": "projects"}
            fields = ("content_object_id", "permission__codename", "content_object__slug")
            direct = ProjectUserObjectPermission.objects.filter(user_id=user.pk, **wanted).values_list(*fields)
            by_group = ProjectGroupObjectPermission.objects.filter(group__user=user.pk, **wanted).values_list(*fields)
            rows = direct.union(by_group)
        for pk, perm, slug in rows:
            if token is None or token.project_id in (None, pk):
                grants[perm][pk] = slug
    return grants


class TokenCallers:
    """Per process: a token's row (with its user and project) and its grants, for `ttl` seconds.

    A `log_metric` call is one small insert; authenticating its token and reading its grants were two of its
    four queries and most of its server time. Entries live `PORTAL_MLFLOW_AUTH_TTL` seconds (never past the
    token's expiry) and are all dropped in this process when a token, user, membership, group or project
    permission changes (`forget_all`, connected in apps.py); other processes see such a change within the TTL,
    as the serving router's cache does. The cached objects are shared by concurrent requests: read, never changed.
    """

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, ApiToken, dict[str, dict[int, str]]]] = {}
        self._lock = threading.Lock()

    def caller(self, raw: str, header_project: str | None, ttl: float) -> Caller | None:
        """The caller of the token `raw` (None: unknown, revoked, expired or its user inactive)."""
        digest = hash_token(raw)
        entry = self._entries.get(digest)
        now = time.monotonic()
        if entry is None or entry[0] <= now:
            token = authenticate_token(raw)
            if token is None:
                self._entries.pop(digest, None)
                return None
            if token.project_id is not None:
                token.project  # noqa: B018 - loaded once here, not by concurrent requests
            grants = load_grants(token.user, token)
            deadline = now + ttl
            if token.expires_at is not None:
                deadline = min(deadline, now + (token.expires_at - timezone.now()).total_seconds())
            entry = (deadline, token, grants)
            if ttl > 0:
                with self._lock:
                    if len(self._entries) >= self.MAX_ENTRIES:
                        self._entries.clear()
                    self._entries[digest] = entry
        _deadline, token, grants = entry
        return Caller(token.user, token, header_project, {"grants": grants})

    def forget_all(self, **_signal: Any) -> None:
        with self._lock:
            self._entries.clear()


@dataclass
class Caller:
    """The user (and token) of one API request, with the project new objects go to (if determined)."""

    user: Any
    token: ApiToken | None = None
    header_project: str | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def _grants(self) -> dict[str, dict[int, str]]:
        if "grants" not in self._cache:
            self._cache["grants"] = load_grants(self.user, self.token)
        return self._cache["grants"]

    @property
    def visible(self) -> dict[int, str]:
        """{project id: slug} of the projects this caller can see."""
        return self._grants()[VIEW]

    @property
    def writable(self) -> dict[int, str]:
        return self._grants()[CONTRIBUTE]

    @property
    def read_only(self) -> bool:
        return self.token is not None and self.token.read_only

    @cached_property
    def project(self) -> Project | None:
        """The project implied by the token or the X-Portal-Project header (None: names must say it)."""
        if self.token is not None and self.token.project_id is not None:
            return self.token.project
        if self.header_project:
            pk = next((pk for pk, slug in self.visible.items() if slug == self.header_project), None)
            if pk is None:
                raise NotFound(_("Project '%(slug)s' does not exist.") % {"slug": self.header_project})
            return Project.objects.get(pk=pk)
        return None

    def check(self, project_id: int, *, write: bool = False, what: str = "") -> None:
        """404 when the project is not visible; 403 when writing is not allowed."""
        if project_id not in self.visible:
            raise NotFound(what or _("Resource does not exist."))
        if write:
            self.check_write(project_id)

    def check_write(self, project_id: int) -> None:
        if self.read_only:
            raise Forbidden(_("This token is read-only."))
        if project_id not in self.writable:
            raise Forbidden(_("Your role in this project does not allow this."))

    def split_name(self, full_name: str, *, write: bool = False) -> tuple[Project, str]:
        """The project and the bare name of an experiment or registered model named by the client."""
        project = self.project
        if project is not None:
            prefix = f"{project.slug}/"
            name = full_name[len(prefix) :] if full_name.startswith(prefix) else full_name
            self.check(project.pk, write=write)
            return project, name
        slug, sep, name = full_name.partition("/")
        if not sep or not name:
            raise InvalidParameter(
                _(
                    "This token is not limited to one project: name it '<project-slug>/%(name)s' or send the "
                    "X-Portal-Project header."
                )
                % {"name": full_name}
            )
        pk = next((pk for pk, s in self.visible.items() if s == slug), None)
        if pk is None:
            raise NotFound(_("Project '%(slug)s' does not exist.") % {"slug": slug})
        self.check(pk, write=write)
        return Project.objects.get(pk=pk), name

    def display_name(self, project_id: int, name: str) -> str:
        """Names as this caller writes them: bare under a project token or header, else `<slug>/<name>`."""
        if self.project is not None:
            return name
        slug = self.visible.get(project_id)
        return f"{slug}/{name}" if slug else name


TOKEN_CALLERS = TokenCallers()
