"""Alert rules and channels: the workflows behind the pages, the API and the admin. Errors are `ValidationError`
keyed by field (a rule's parameters as "params.<name>")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator, URLValidator
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.alerts import engine
from apps.alerts.kinds import KINDS
from apps.alerts.models import AlertRule, Channel, Delivery
from apps.jobs.models import Pipeline
from apps.outbox.services import enqueue
from apps.projects.models import Project, slug_validator
from apps.serving.models import InferenceService
from portal.lib.outbound import private_address, refusal

MAX_URL_CHARS = 2000
MAX_SECRET_CHARS = 500


def _name_errors(name: str) -> list[str]:
    try:
        slug_validator(name)
    except ValidationError as exc:
        return list(exc.messages)
    return []


# --- Channels -------------------------------------------------------------------------------------------------------


def _channel_errors(project: Project, kind: str, recipients: str, url: str | None, secret: str | None) -> dict:
    errors: dict[str, list[str]] = {}
    if kind not in Channel.Kind.values:
        return {"kind": [_("Choose one of: %(kinds)s.") % {"kinds": ", ".join(Channel.Kind.values)}]}
    names = [r for r in (p.strip() for p in recipients.replace("\n", ",").split(",")) if r]
    if kind == Channel.Kind.EMAIL:
        bad = [n for n in names if not _is_email(n)]
        if bad:
            errors["recipients"] = [_("Not an email address: %(value)s") % {"value": bad[0]}]
    elif kind == Channel.Kind.INAPP:
        found = set(project.members.filter(username__in=names).values_list("username", flat=True))
        missing = [n for n in names if n not in found]
        if missing:
            errors["recipients"] = [_("Not a member of this project: %(value)s") % {"value": missing[0]}]
    elif names:
        errors["recipients"] = [_("Webhooks have no recipients: leave this empty.")]
    if kind in Channel.WEBHOOKS:
        if url is not None:
            try:
                URLValidator(schemes=["http", "https"])(url)
            except ValidationError:
                errors["url"] = [_("Enter an http:// or https:// URL.")]
            if len(url) > MAX_URL_CHARS:
                errors["url"] = [_("At most 2000 characters.")]
            elif "url" not in errors and (found := private_address(url, resolve=False)):
                errors["url"] = [refusal(found)]
    elif url:
        errors["url"] = [_("Only webhooks have a URL.")]
    if secret and kind not in (Channel.Kind.WEBHOOK, Channel.Kind.DINGTALK):
        errors["secret"] = [_("Only generic and DingTalk webhooks are signed.")]
    elif secret and len(secret) > MAX_SECRET_CHARS:
        errors["secret"] = [_("At most 500 characters.")]
    return errors


def _is_email(value: str) -> bool:
    try:
        EmailValidator()(value)
    except ValidationError:
        return False
    return True


def _taken(project: Project, model: type, name: str, exclude: int | None = None) -> bool:
    return model.objects.filter(project=project, name=name).exclude(pk=exclude).exists()


def create_channel(
    project: Project, user: Any, *, name: str, kind: str, recipients: str = "", url: str | None = None,
    secret: str | None = None, enabled: bool = True,
) -> Channel:  # fmt: skip
    """A new channel. A webhook needs its URL; nothing is written when a field is refused."""
    errors = _channel_errors(project, kind, recipients, url or None, secret)
    if kind in Channel.WEBHOOKS and not url and "url" not in errors:
        errors["url"] = [_("A webhook needs its URL.")]
    if name_errors := _name_errors(name):
        errors["name"] = name_errors
    elif _taken(project, Channel, name):
        errors["name"] = [_("This project already has a channel named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)
    channel = Channel(
        project=project, name=name, kind=kind, recipients=recipients.strip(), url=url or None, secret=secret or None,
        enabled=enabled, created_by=user,
    )  # fmt: skip
    try:
        with transaction.atomic():
            channel.save()
    except IntegrityError:
        raise ValidationError(
            {"name": [_("This project already has a channel named “%(name)s”.") % {"name": name}]}
        ) from None
    return channel


def update_channel(
    channel: Channel, *, name: str | None = None, recipients: str | None = None, url: str | None = None,
    secret: str | None = None, enabled: bool | None = None,
) -> Channel:  # fmt: skip
    """Change a channel; a URL or secret left out (None) keeps the stored one (they are never shown back). The kind
    is fixed once created."""
    recipients = channel.recipients if recipients is None else recipients
    errors = _channel_errors(channel.project, channel.kind, recipients, url, secret)
    if channel.kind in Channel.WEBHOOKS and url == "":
        errors["url"] = [_("A webhook needs its URL.")]
    if name is not None and name != channel.name:
        if name_errors := _name_errors(name):
            errors["name"] = name_errors
        elif _taken(channel.project, Channel, name, exclude=channel.pk):
            errors["name"] = [_("This project already has a channel named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)
    if name is not None:
        channel.name = name
    channel.recipients = recipients.strip()
    if url:
        channel.url = url
    if secret is not None:
        channel.secret = secret or None
    if enabled is not None:
        channel.enabled = enabled
    channel.updated_at = timezone.now()
    channel.save()
    return channel


def delete_channel(channel: Channel) -> None:
    channel.delete()


def send_test(channel: Channel) -> Delivery:
    """Queue a test message to the channel (sent by the worker; its row says how it went)."""
    from apps.alerts.tasks import deliver

    delivery = Delivery.objects.create(project=channel.project, channel=channel, kind=Delivery.Kind.TEST)
    enqueue(deliver, delivery.pk)
    return delivery


# --- Rules ----------------------------------------------------------------------------------------------------------


def _rule_errors(project: Project, kind: str, params: Any, channels: Iterable[Any]) -> tuple[dict, dict, list]:
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    rule_kind = KINDS.get(kind)
    if rule_kind is None:
        errors["kind"] = [_("Choose one of: %(kinds)s.") % {"kinds": ", ".join(KINDS)}]
    else:
        try:
            cleaned = rule_kind.clean_params(params)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        if cleaned.get("pipeline") and not Pipeline.objects.filter(project=project, name=cleaned["pipeline"]).exists():
            errors["params.pipeline"] = [_("No pipeline of this project is named “%(name)s”.") % {
                "name": cleaned["pipeline"]}]  # fmt: skip
        if (
            cleaned.get("service")
            and not InferenceService.objects.filter(project=project, name=cleaned["service"]).exists()
        ):
            errors["params.service"] = [_("No service of this project is named “%(name)s”.") % {
                "name": cleaned["service"]}]  # fmt: skip
    wanted = list(channels)
    found = []
    if not wanted:
        errors["channels"] = [_("Choose at least one channel.")]
    else:
        ids = [c.pk if isinstance(c, Channel) else c for c in wanted]
        found = list(Channel.objects.filter(project=project, pk__in=[i for i in ids if isinstance(i, int)]))
        if len(found) != len(set(ids)):
            errors["channels"] = [_("Choose channels of this project.")]
    return errors, cleaned, found


def create_rule(
    project: Project, user: Any, *, name: str, kind: str, params: Any = None, channels: Iterable[Any] = (),
    enabled: bool = True,
) -> AlertRule:  # fmt: skip
    """A new rule: `kind` from the registry (apps/alerts/kinds.py), `params` checked by it, channels of the
    project (objects or ids)."""
    errors, cleaned, found = _rule_errors(project, kind, params, channels)
    if name_errors := _name_errors(name):
        errors["name"] = name_errors
    elif _taken(project, AlertRule, name):
        errors["name"] = [_("This project already has a rule named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            rule = AlertRule.objects.create(
                project=project, name=name, kind=kind, params=cleaned, enabled=enabled, created_by=user
            )
            rule.channels.set(found)
    except IntegrityError:
        raise ValidationError(
            {"name": [_("This project already has a rule named “%(name)s”.") % {"name": name}]}
        ) from None
    return rule


def update_rule(
    rule: AlertRule, *, name: str | None = None, kind: str | None = None, params: Any = None,
    channels: Iterable[Any] | None = None, enabled: bool | None = None,
) -> AlertRule:  # fmt: skip
    """Change a rule; None keeps a field. Whatever it had firing is closed quietly when its kind, parameters or
    state change (a condition still true fires again under the new settings)."""
    kind = rule.kind if kind is None else kind
    params = rule.params if params is None else params
    channels = list(rule.channels.all()) if channels is None else channels
    errors, cleaned, found = _rule_errors(rule.project, kind, params, channels)
    if name is not None and name != rule.name:
        if name_errors := _name_errors(name):
            errors["name"] = name_errors
        elif _taken(rule.project, AlertRule, name, exclude=rule.pk):
            errors["name"] = [_("This project already has a rule named “%(name)s”.") % {"name": name}]
    if errors:
        raise ValidationError(errors)
    changed = kind != rule.kind or cleaned != rule.params or (enabled is not None and enabled != rule.enabled)
    with transaction.atomic():
        rule.name = rule.name if name is None else name
        rule.kind, rule.params = kind, cleaned
        rule.enabled = rule.enabled if enabled is None else enabled
        rule.updated_at = timezone.now()
        rule.save()
        rule.channels.set(found)
        if changed:
            engine.close_quietly(rule)
    return rule


def delete_rule(rule: AlertRule) -> None:
    rule.delete()


# --- Hooks of the apps below (connected in AlertsConfig.ready) -----------------------------------------------------


def _listens(project_id: int, event: str) -> bool:
    names = [name for name, kind in KINDS.items() if event in kind.events]
    return AlertRule.objects.filter(project_id=project_id, enabled=True, kind__in=names).exists()


def on_run_finished(run: Any) -> None:
    """A pipeline run ended (apps.jobs.orchestrator.on_run_finished): queue its rules' pass, if any listen."""
    from apps.alerts.tasks import run_finished

    if _listens(run.project_id, "run_finished"):
        enqueue(run_finished, run.pk)


def on_notebook_culled(nb: Any) -> None:
    """The idle culler stopped a notebook (apps.notebooks.culler.on_culled)."""
    from apps.alerts.tasks import notebook_culled

    if _listens(nb.project_id, "notebook_culled"):
        enqueue(notebook_culled, nb.pk)
