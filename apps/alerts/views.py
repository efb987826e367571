"""Alert pages of a project: rules, channels (with a test button) and the history of what fired."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.alerts import services
from apps.alerts.filters import AlertEventFilterSet
from apps.alerts.forms import ChannelForm, RuleForm
from apps.alerts.models import AlertEvent, AlertRule, Channel, Delivery
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.forms import run_service

# --- Rules ----------------------------------------------------------------------------------------------------------


@project_view(VIEW, methods=("GET",))
def rule_list(request: HttpRequest, project: Project) -> HttpResponse:
    rules = (
        AlertRule.objects.filter(project=project)
        .prefetch_related("channels")
        .annotate(firing=Count("events", filter=Q(events__status=AlertEvent.Status.FIRING)))
    )
    context = {
        "project": project, "tab": "alerts", "section": "rules", "rules": rules,
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
    }  # fmt: skip
    return render(request, "alerts/rule_list.html", context)


def _rule_form_page(request: HttpRequest, project: Project, form: RuleForm, rule: AlertRule | None) -> HttpResponse:
    status = 400 if form.errors else 200
    context = {"project": project, "tab": "alerts", "section": "rules", "form": form, "rule": rule}
    return render(request, "alerts/rule_form.html", context, status=status)


@project_view(CONTRIBUTE)
def rule_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = RuleForm(request.POST or None, project=project)
    if request.method == "POST" and form.is_valid():
        try:
            rule = services.create_rule(project, request.user, **form.values())
        except ValidationError as exc:
            form.put_errors(exc.message_dict)
        else:
            messages.success(request, _("Rule “%(name)s” saved.") % {"name": rule.name})
            return redirect("alerts:rule-list", project=project.slug)
    return _rule_form_page(request, project, form, None)


@project_view(CONTRIBUTE, model=AlertRule)
def rule_edit(request: HttpRequest, project: Project, rule: AlertRule) -> HttpResponse:
    initial = {"name": rule.name, "kind": rule.kind, "channels": list(rule.channels.all()), "enabled": rule.enabled,
               **rule.params}  # fmt: skip
    form = RuleForm(request.POST or None, project=project, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.update_rule(rule, **form.values())
        except ValidationError as exc:
            form.put_errors(exc.message_dict)
        else:
            messages.success(request, _("Rule “%(name)s” saved.") % {"name": rule.name})
            return redirect("alerts:rule-list", project=project.slug)
    return _rule_form_page(request, project, form, rule)


@project_view(CONTRIBUTE, model=AlertRule, methods=("POST",))
def rule_delete(request: HttpRequest, project: Project, rule: AlertRule) -> HttpResponse:
    name = rule.name
    services.delete_rule(rule)
    messages.success(request, _("Rule “%(name)s” deleted.") % {"name": name})
    return redirect("alerts:rule-list", project=project.slug)


# --- Channels -------------------------------------------------------------------------------------------------------


@project_view(VIEW, methods=("GET",))
def channel_list(request: HttpRequest, project: Project) -> HttpResponse:
    channels = list(Channel.objects.filter(project=project))
    last: dict[int, Delivery] = {}
    for delivery in Delivery.objects.filter(project=project).order_by("-created_at", "-pk")[:200]:
        last.setdefault(delivery.channel_id, delivery)
    for channel in channels:
        channel.last_delivery = last.get(channel.pk)
    context = {
        "project": project, "tab": "alerts", "section": "channels", "channels": channels,
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
    }  # fmt: skip
    return render(request, "alerts/channel_list.html", context)


def _channel_form_page(
    request: HttpRequest, project: Project, form: ChannelForm, channel: Channel | None
) -> HttpResponse:
    status = 400 if form.errors else 200
    context = {"project": project, "tab": "alerts", "section": "channels", "form": form, "channel": channel}
    return render(request, "alerts/channel_form.html", context, status=status)


@project_view(CONTRIBUTE)
def channel_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = ChannelForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        channel = run_service(form, services.create_channel, project, request.user, **form.values())
        if channel is not None:
            messages.success(request, _("Channel “%(name)s” saved.") % {"name": channel.name})
            return redirect("alerts:channel-list", project=project.slug)
    return _channel_form_page(request, project, form, None)


@project_view(CONTRIBUTE, model=Channel)
def channel_edit(request: HttpRequest, project: Project, channel: Channel) -> HttpResponse:
    initial = {"name": channel.name, "recipients": channel.recipients, "enabled": channel.enabled}
    form = ChannelForm(request.POST or None, initial=initial, editing=True)
    if (
        request.method == "POST"
        and form.is_valid()
        and run_service(form, services.update_channel, channel, **form.values()) is not None
    ):
        messages.success(request, _("Channel “%(name)s” saved.") % {"name": channel.name})
        return redirect("alerts:channel-list", project=project.slug)
    return _channel_form_page(request, project, form, channel)


@project_view(CONTRIBUTE, model=Channel, methods=("POST",))
def channel_delete(request: HttpRequest, project: Project, channel: Channel) -> HttpResponse:
    name = channel.name
    services.delete_channel(channel)
    messages.success(request, _("Channel “%(name)s” deleted.") % {"name": name})
    return redirect("alerts:channel-list", project=project.slug)


@project_view(CONTRIBUTE, model=Channel, methods=("POST",))
def channel_test(request: HttpRequest, project: Project, channel: Channel) -> HttpResponse:
    services.send_test(channel)
    messages.info(
        request, _("A test message to “%(name)s” is on its way; the channel list shows how it went.") % {
            "name": channel.name}
    )  # fmt: skip
    return redirect("alerts:channel-list", project=project.slug)


# --- History --------------------------------------------------------------------------------------------------------


@project_view(VIEW, methods=("GET",))
def event_list(request: HttpRequest, project: Project) -> HttpResponse:
    queryset = (
        AlertEvent.objects.filter(project=project)
        .select_related("rule")
        .annotate(
            sent=Count("deliveries", filter=Q(deliveries__status=Delivery.Status.SENT)),
            failed=Count("deliveries", filter=Q(deliveries__status=Delivery.Status.FAILED)),
        )
    )
    filters = AlertEventFilterSet(request.GET, queryset=queryset)
    context = {
        "project": project, "tab": "alerts", "section": "history", "filter": filters, "events": filters.qs[:200],
    }  # fmt: skip
    return render(request, "alerts/event_list.html", context)
