from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.accounts import services
from apps.accounts.forms import ProfileForm, TokenForm
from apps.accounts.models import ApiToken, Notification
from apps.projects.permissions import projects_for
from apps.projects.views import run_service


@login_required
@require_http_methods(["GET", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    form = ProfileForm(request.POST or None, instance=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Profile saved."))
        return redirect("accounts:profile")
    return render(request, "accounts/profile.html", {"form": form}, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None, projects=projects_for(request.user))
    new_token = None
    if request.method == "POST" and form.is_valid():
        result = run_service(form, services.create_token, request.user, **form.cleaned_data)
        if result is not None:
            new_token = result[1]
            form = TokenForm(projects=projects_for(request.user))
    tokens = ApiToken.objects.filter(user=request.user).select_related("project")
    return render(
        request,
        "accounts/tokens.html",
        {"form": form, "tokens": tokens, "new_token": new_token},
        status=400 if form.errors else 200,
    )


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
