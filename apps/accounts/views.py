"""Account pages: profile, API tokens, notifications, and the lockout answer of the login brute-force guard."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views import i18n
from django.views.decorators.http import require_http_methods

from apps.accounts import services
from apps.accounts.filters import ApiTokenFilterSet
from apps.accounts.forms import ProfileForm, TokenForm
from apps.accounts.middleware import apply_user_language
from apps.accounts.models import ApiToken, Notification
from apps.accounts.throttles import TokenCreateRateThrottle, throttled, too_many_requests
from apps.projects.permissions import projects_for
from portal.lib.forms import run_service
from portal.lib.listing import listing


@login_required
@require_http_methods(["GET", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    form = ProfileForm(request.POST or None, instance=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        apply_user_language(request, request.user)  # the message below, and the pages after, in the new language
        messages.success(request, _("Profile saved."))
        return redirect("accounts:profile")
    return render(request, "accounts/profile.html", {"form": form}, status=400 if form.errors else 200)


@require_http_methods(["POST"])
def set_language(request: HttpRequest) -> HttpResponse:
    """The language switcher: Django's set_language (the cookie, then back to `next`), and for a signed-in user
    the saved preference too, which UserLanguageMiddleware applies on every request (and from any browser)."""
    code = request.POST.get("language", "")
    if code not in dict(settings.LANGUAGES):
        return HttpResponseBadRequest(_("Unknown language “%(code)s”.") % {"code": code[:20]})
    if request.user.is_authenticated and request.user.language != code:
        request.user.language = code
        request.user.save(update_fields=["language"])
    return i18n.set_language(request)


@login_required
@require_http_methods(["GET", "POST"])
@throttled(TokenCreateRateThrottle)
def token_list(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None, projects=projects_for(request.user))
    new_token = None
    if request.method == "POST" and form.is_valid():
        result = run_service(form, services.create_token, request.user, **form.cleaned_data)
        if result is not None:
            new_token = result[1]
            form = TokenForm(projects=projects_for(request.user))
    tokens = ApiToken.objects.filter(user=request.user).select_related("project").order_by("-created_at", "-pk")
    found = listing(request, ApiTokenFilterSet, tokens, defaults=TOKEN_DEFAULTS)
    return render(
        request,
        "accounts/tokens.html",
        {"form": form, "listing": found, "new_token": new_token},
        status=400 if form.errors else found.status,
    )


# What the tokens page lists unless told otherwise: the person's own live tokens, not the one the platform mints for
# every task attempt and notebook, nor revoked ones (`?kind=&state=` shows every token).
TOKEN_DEFAULTS = {"kind": ApiToken.Kind.PERSONAL, "state": "active"}


@login_required
@require_http_methods(["POST"])
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    services.revoke_token(token)
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("accounts:tokens")


@login_required
@require_http_methods(["GET", "POST"])
def notification_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        services.mark_read(request.user)
        return redirect("accounts:notifications")
    notifications = Notification.objects.filter(user=request.user)[:100]
    return render(request, "accounts/notifications.html", {"notifications": notifications})


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: Any) -> HttpResponse:
    """django-axes' answer once a username+IP pair has failed too often (AXES_LOCKOUT_CALLABLE): 429, Retry-After."""
    from axes.helpers import get_cool_off  # axes' helpers read its settings at import: import when first needed

    cool_off = get_cool_off(request)
    seconds = max(1, int(cool_off.total_seconds())) if cool_off else 3600
    return too_many_requests(
        seconds,
        _("Too many failed logins for this account from your address. Try again in %(minutes)d minutes.")
        % {"minutes": max(1, round(seconds / 60))},
    )
