"""The notebook proxy (HTTP): `/notebook/<pk>/…` relayed to the notebook's server behind the portal's login.

The notebook server listens where only the portal reaches it (loopback, a cluster-internal Service) and knows
nothing of the portal's users: it trusts whoever presents its token. So the portal checks the session, that the
notebook is the user's own in a project they still belong to (anything else is 404, as for every other tenant
object), then adds `Authorization: token <t>` on the way up. The browser never holds the token: the portal's
cookies and Authorization header never go up, and the token is blanked out of every response that comes back
(JupyterLab writes it into its page config).

Because the token now authenticates every proxied request, Jupyter's own XSRF check stands down for them, so
unsafe methods must prove they come from the portal's own pages: Origin (or, failing that, Referer) must be
the portal's origin, as Django's CsrfViewMiddleware requires.

Bodies stream both ways with flat memory: the request body as Django spooled it (in memory up to
FILE_UPLOAD_MAX_MEMORY_SIZE, then a temporary file), the response in the chunks the upstream sends, never
buffered whole. One pooled `httpx.AsyncClient` per process (per event loop) keeps connections to the servers
alive across requests. The relaying is portal/lib/proxy.py's (the Spark UI proxy shares it); this module decides
who may open what. Only an ASGI server (uvicorn) runs this view; the websockets are apps/notebooks/consumers.py.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from apps.notebooks.models import Notebook
from portal.lib.proxy import SAFE_METHODS, TokenScrubber, forward, kept_cookies, same_origin

__all__ = ["TokenScrubber", "kept_cookies", "notebook_for", "notebook_proxy"]


def notebook_for(user: Any, pk: int) -> Notebook | None:
    """The notebook `pk` if `user` may open it: their own, in a project they still belong to.

    Only the owner: the server runs code as its owner, with their files and the project's secrets they were
    given, so another member (even the project's owner) opening it would act as someone else. Superusers are
    no exception, for the same reason. Everyone else gets the same 404 as for a notebook that does not exist.
    """
    if not getattr(user, "is_authenticated", False):
        return None
    return Notebook.objects.for_user(user).filter(pk=pk, owner=user).select_related("project").first()


def notebook_page_url(notebook: Notebook) -> str:
    """The notebook's page in the portal (start/stop, logs), or its project's overview until that page exists."""
    try:
        return reverse("notebooks:notebook-detail", kwargs={"project": notebook.project.slug, "pk": notebook.pk})
    except NoReverseMatch:
        return reverse("projects:overview", kwargs={"project": notebook.project.slug})


def upstream_url(notebook: Notebook, request: HttpRequest, path: str) -> str:
    """The server's URL of this request: the same path (the server's base URL is the proxy's) and query string.

    The path is taken as the browser encoded it (a file named "a b%.ipynb" must arrive as it left), from the
    ASGI scope's raw_path where the server gives one.
    """
    prefix = notebook.base_path
    raw_path = request.scope.get("raw_path") or b""
    raw = raw_path.decode("latin-1")
    target = raw if raw.startswith(prefix) else prefix + quote(path, safe="/:@!$&'()*+,;=~")
    query = request.scope.get("query_string", b"").decode("latin-1")
    return notebook.upstream.rstrip("/") + target + (f"?{query}" if query else "")


async def portal_page(
    request: HttpRequest, notebook: Notebook | None, status: int, title: str, reason: str
) -> HttpResponse:
    """A small page of the portal's own (its CSP and headers apply) in place of the notebook."""
    context = {
        "notebook": notebook,
        "title": title,
        "reason": reason,
        "page_url": notebook_page_url(notebook) if notebook else None,
        "starting": notebook is not None and notebook.status == Notebook.Status.STARTING,
    }
    response = await sync_to_async(render)(request, "notebooks/proxy_unavailable.html", context, status=status)
    if status == 503:
        response["Retry-After"] = "5"
    if context["starting"]:
        response["Refresh"] = "3"  # reload until it runs (a header: the page's CSP allows no script for this)
    return response


@csrf_exempt  # the portal's CSRF token is not Jupyter's to carry: same_origin() guards unsafe methods instead
async def notebook_proxy(request: HttpRequest, pk: int, path: str = "") -> HttpResponseBase:
    """Every method, every path under `/notebook/<pk>/`: checked here, then relayed to the notebook's server."""
    user = await request.auser()
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    notebook = await sync_to_async(notebook_for)(user, pk)
    if notebook is None or any(segment in (".", "..") for segment in path.split("/")):
        raise Http404(_("No such notebook."))
    if request.method not in SAFE_METHODS and not same_origin(request):
        raise PermissionDenied(_("Cross-site request to a notebook refused: it must come from the portal's pages."))
    token = notebook.token or ""
    if notebook.status != Notebook.Status.RUNNING or not notebook.upstream:
        if request.method in ("GET", "HEAD") and not path:
            return redirect(notebook_page_url(notebook))
        title = _("The notebook is not running")
        reason = _("Its status is “%(status)s”.") % {"status": notebook.get_status_display()}
        return await portal_page(request, notebook, 503, title, reason)

    try:
        return await forward(request, upstream_url(notebook, request, path), label="notebook proxy", token=token)
    except httpx.HTTPError as exc:
        reason = _("The notebook server did not answer (%(error)s).") % {"error": type(exc).__name__}
        return await portal_page(request, notebook, 502, _("The notebook server is unreachable"), reason)
