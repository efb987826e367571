"""Creating and changing a service's settings, checked field by field (forms show the messages, the API answers 400
with them), and freezing what a deploy needs into a revision's config.

Errors are `ValidationError`s keyed by field. What to serve is one of: a pinned model version, the version an alias
of a registered model points at (moving the alias rolls the service), or a custom command (framework "custom"); an
`llm` service serves a chat model: the packaged one unless a version or an alias names another.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.models.models import ModelAlias, ModelVersion, RegisteredModel
from apps.projects.models import Project, slug_validator
from apps.projects.services import UNCHANGED
from apps.runtime.admission import quota_limits, too_large
from apps.serving.models import Framework, InferenceService
from apps.serving.replicas import default_framework
from apps.serving.services.deploy import deploy as deploy_service
from portal.lib.resources import Resources, parse_memory, read_amount

MAX_REPLICAS = 50
MIN_MEMORY = 64 * 2**20
# An llm replica holds the model in float32 plus torch: ~1.2 GB for SmolLM2-135M (docs/serving-llm.md).
MIN_LLM_MEMORY = 1536 * 2**20
SERVES_WITHOUT_MODEL = (Framework.CUSTOM, Framework.LLM)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
_ALIAS_RE = re.compile(r"^[\w-]+$")
SETTINGS = (
    "description",
    "stage",
    "registered_model",
    "model_version",
    "follow_alias",
    "framework",
    "image",
    "command",
    "env",
    "cpu",
    "memory",
    "gpu",
    "min_replicas",
    "max_replicas",
    "scale_metric",
    "scale_target",
    "auth",
    "payload_log_percent",
    "payload_log_max_kb",
    "payload_log_keep",
)
# Settings that change what the replicas run: they take effect with the next deploy (a new revision). The others
# (scaling bounds and target, auth, description, stage) apply at once.
DEPLOYED = (
    "registered_model",
    "model_version",
    "follow_alias",
    "framework",
    "image",
    "command",
    "env",
    "cpu",
    "memory_bytes",
    "gpu",
)  # model fields


def _add(errors: dict[str, list[str]], field: str, message: str) -> None:
    errors.setdefault(field, []).append(message)


def _decimal(value: Any, field: str, minimum: Decimal, errors: dict[str, list[str]]) -> Decimal:
    try:
        result = read_amount(value).quantize(Decimal("0.01"))  # "0.5", "500m": as pipeline nodes read it
    except (InvalidOperation, ValueError):
        _add(errors, field, _("Give a number."))
        return Decimal(0)
    if not result.is_finite() or result < minimum or result > 1000:
        _add(errors, field, _("Give a number from %(min)s to 1000.") % {"min": minimum})
    return result


def _whole(value: Any, field: str, minimum: int, maximum: int, errors: dict[str, list[str]]) -> int:
    if isinstance(value, bool):
        value = "x"
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        _add(errors, field, _("Give a whole number."))
        return minimum
    if not minimum <= number <= maximum:
        _add(errors, field, _("Give a whole number from %(min)d to %(max)d.") % {"min": minimum, "max": maximum})
    return number


def parse_command(value: Any) -> list[str] | None:
    """A command as a list of strings, from a list or a shell-like string; None when it is neither."""
    if value in (None, ""):
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return None
    if isinstance(value, list | tuple) and all(isinstance(token, str) for token in value):
        return list(value)
    return None


def parse_env(value: Any) -> dict[str, str] | None:
    """{NAME: value} from a mapping or from NAME=value lines; None when it is neither."""
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        env = {}
        for line in value.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, rest = line.partition("=")
            if not sep:
                return None
            env[name.strip()] = rest.strip()
        value = env
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    if any(isinstance(v, dict | list) for v in value.values()):
        return None
    return {k: "" if v is None else str(v) for k, v in value.items()}


def _registered_model(project: Project, value: Any, errors: dict[str, list[str]]) -> RegisteredModel | None:
    if value in (None, ""):
        return None
    if isinstance(value, RegisteredModel):
        model = value if value.project_id == project.pk else None
    elif isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        model = RegisteredModel.objects.filter(project=project, pk=int(value)).first()
        model = model or RegisteredModel.objects.filter(project=project, name=str(value)).first()
    else:
        model = RegisteredModel.objects.filter(project=project, name=str(value)).first()
    if model is None:
        _add(errors, "registered_model", _("No registered model “%(name)s” in this project.") % {"name": value})
    return model


def _version(model: RegisteredModel | None, value: Any, errors: dict[str, list[str]]) -> ModelVersion | None:
    if value in (None, ""):
        return None
    if model is None:
        if "registered_model" not in errors:
            _add(errors, "registered_model", _("Choose the registered model of the version."))
        return None
    if isinstance(value, ModelVersion):
        version = value if value.registered_model_id == model.pk else None
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            _add(errors, "model_version", _("Give a version number."))
            return None
        version = ModelVersion.objects.filter(registered_model=model, version=number).first()
    if version is None:
        _add(errors, "model_version", _("%(model)s has no version %(v)s.") % {"model": model.name, "v": value})
        return None
    if version.status != ModelVersion.Status.READY:
        values = {"v": version.version, "s": version.get_status_display()}
        _add(errors, "model_version", _("Version %(v)s is not ready (%(s)s).") % values)
    return version


def _quota_errors(project: Project, cpu: Decimal, memory: int, gpu: Decimal, replicas: int) -> dict[str, list[str]]:
    """The service's minimum replicas alone must fit the project's quota (else it could never serve)."""
    errors = too_large(Resources.of(cpu, memory, gpu), quota_limits(project), replicas=max(replicas, 1))
    return {name: [message] for name, message in errors.items()}


def clean_settings(project: Project, values: dict[str, Any], *, allow_waiting: bool = False) -> dict[str, Any]:
    """Model field values from the settings in `values` (every key of SETTINGS), or ValidationError by field.

    `allow_waiting`: an alias the registered model does not have yet is accepted (the service waits for it; the
    demo's service does); otherwise it must exist."""
    errors: dict[str, list[str]] = {}
    out: dict[str, Any] = {"description": str(values.get("description") or "")}
    stage = values.get("stage") or InferenceService.Stage.DEBUG
    if stage not in InferenceService.Stage.values:
        _add(errors, "stage", _("Choose debug, test or prod."))
    out["stage"] = stage
    framework = values.get("framework") or Framework.SKLEARN
    if framework not in Framework.values:
        _add(errors, "framework", _("Choose one of: %(v)s.") % {"v": ", ".join(Framework.values)})
    out["framework"] = framework

    model = _registered_model(project, values.get("registered_model"), errors)
    version = _version(model, values.get("model_version"), errors)
    alias = str(values.get("follow_alias") or "").strip()
    if alias:
        if version is not None:
            _add(errors, "follow_alias", _("Serve either a pinned version or the version of an alias, not both."))
        elif not _ALIAS_RE.match(alias) or len(alias) > 255:
            _add(errors, "follow_alias", _("An alias has letters, digits, '_' and '-' only."))
        elif model is None:
            if "registered_model" not in errors:
                _add(errors, "registered_model", _("Choose the registered model whose alias to follow."))
        elif not allow_waiting and not ModelAlias.objects.filter(registered_model=model, alias=alias).exists():
            known = ", ".join(model.aliases.values_list("alias", flat=True)) or _("none")
            _add(errors, "follow_alias", _("%(model)s has no alias “%(alias)s” (it has: %(known)s).")
                 % {"model": model.name, "alias": alias, "known": known})  # fmt: skip
    elif model is not None and version is None and "model_version" not in errors:
        _add(errors, "model_version", _("Choose a version, or an alias to follow."))
    # An llm service without a registered model serves the packaged chat model (SmolLM2-135M-Instruct).
    if framework not in SERVES_WITHOUT_MODEL and model is None and "registered_model" not in errors:
        _add(errors, "registered_model", _("Choose the registered model to serve (or the custom framework)."))
    out.update(registered_model=model, model_version=version, follow_alias=alias)

    command = parse_command(values.get("command"))
    if command is None:
        _add(errors, "command", _("Give the command as a list of strings or one shell-like line."))
        command = []
    if framework == Framework.CUSTOM and not command:
        _add(errors, "command", _("A custom server needs a command ({port} is replaced by the port to listen on)."))
    if framework != Framework.CUSTOM and command:
        _add(errors, "command", _("Only a custom server takes a command; the others run the portal's model server."))
    out["command"] = command
    image = str(values.get("image") or "").strip()
    if image and (len(image) > 200 or not _IMAGE_RE.match(image)):
        _add(errors, "image", _("Give an image reference such as registry.example.com/team/server:1.0."))
    out["image"] = image
    env = parse_env(values.get("env"))
    if env is None:
        _add(errors, "env", _("Give NAME=value lines (or a mapping of names to values)."))
        env = {}
    bad = [name for name in env if not _ENV_NAME.match(name) or name.startswith("PORTAL_")]
    if bad:
        _add(errors, "env", _("Not a usable variable name: %(names)s.") % {"names": ", ".join(sorted(bad))})
    out["env"] = env

    cpu = _decimal(values.get("cpu", 1), "cpu", Decimal("0.1"), errors)
    gpu = _decimal(values.get("gpu", 0), "gpu", Decimal(0), errors)
    if "gpu" not in errors and gpu != gpu.to_integral_value():
        _add(errors, "gpu", _("Give a whole number of GPUs."))
    try:
        memory = parse_memory(values.get("memory") or ("2Gi" if framework == Framework.LLM else "1Gi")) or 0
    except ValueError:
        _add(errors, "memory", _("Give a size such as 512Mi, 4Gi or a number of bytes."))
        memory = 0
    if "memory" not in errors and not MIN_MEMORY <= memory <= 2**50:
        _add(errors, "memory", _("Give at least 64Mi."))
    elif "memory" not in errors and framework == Framework.LLM and memory < MIN_LLM_MEMORY:
        _add(errors, "memory", _("A chat model needs at least 1536Mi (it is held in memory in float32)."))
    out.update(cpu=cpu, gpu=gpu, memory_bytes=memory)

    min_replicas = _whole(values.get("min_replicas", 1), "min_replicas", 1, MAX_REPLICAS, errors)
    max_replicas = _whole(values.get("max_replicas", min_replicas), "max_replicas", 1, MAX_REPLICAS, errors)
    if "min_replicas" not in errors and "max_replicas" not in errors and min_replicas > max_replicas:
        _add(errors, "max_replicas", _("At least the minimum (%(n)d).") % {"n": min_replicas})
    metric = values.get("scale_metric") or InferenceService.ScaleMetric.CONCURRENCY
    if metric not in InferenceService.ScaleMetric.values:
        _add(errors, "scale_metric", _("Choose concurrency or cpu."))
    target = _whole(values.get("scale_target", 8), "scale_target", 1, 10_000, errors)
    out.update(min_replicas=min_replicas, max_replicas=max_replicas, scale_metric=metric, scale_target=target)
    auth = values.get("auth") or InferenceService.Auth.TOKEN
    if auth not in InferenceService.Auth.values:
        _add(errors, "auth", _("Choose token, key or public."))
    out["auth"] = auth
    out["payload_log_percent"] = _whole(values.get("payload_log_percent", 0), "payload_log_percent", 0, 100, errors)
    out["payload_log_max_kb"] = _whole(values.get("payload_log_max_kb", 64), "payload_log_max_kb", 1, 1024, errors)
    out["payload_log_keep"] = _whole(values.get("payload_log_keep", 10_000), "payload_log_keep", 1, 1_000_000, errors)
    if not errors:
        errors.update(_quota_errors(project, cpu, memory, gpu, min_replicas))
    if errors:
        raise ValidationError(errors)
    return out


def current_settings(service: InferenceService) -> dict[str, Any]:
    """The service's settings in the form `clean_settings` takes."""
    return {
        "description": service.description, "stage": service.stage,
        "registered_model": service.registered_model, "model_version": service.model_version,
        "follow_alias": service.follow_alias, "framework": service.framework, "image": service.image,
        "command": service.command, "env": service.env, "cpu": service.cpu, "memory": service.memory_bytes,
        "gpu": service.gpu, "min_replicas": service.min_replicas, "max_replicas": service.max_replicas,
        "scale_metric": service.scale_metric, "scale_target": service.scale_target, "auth": service.auth,
        "payload_log_percent": service.payload_log_percent, "payload_log_max_kb": service.payload_log_max_kb,
        "payload_log_keep": service.payload_log_keep,
    }  # fmt: skip


def create_service(
    project: Project, user: Any, *, name: str, allow_waiting: bool = False, deploy: bool = False, **values: Any
) -> InferenceService:
    """A new service. `values`: any of SETTINGS. A pinned version or a custom server runs once deployed (`deploy`:
    at once; a ValidationError then says why it cannot, the service staying as created). A service following an
    alias serves what the alias points at from the start, as it will after each move: it deploys at once when the
    alias points somewhere, and otherwise waits for it, saying so (so does it when it cannot deploy now, e.g. no
    agent: the next move, or a deploy from its page, starts it)."""
    unknown = set(values) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    try:
        slug_validator(name)
    except ValidationError as exc:
        errors["name"] = list(exc.messages)
    else:
        if InferenceService.objects.filter(project=project, name=name).exists():
            errors["name"] = [_("This project already has a service named “%(name)s”.") % {"name": name}]
    try:
        fields = clean_settings(project, values, allow_waiting=allow_waiting)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            service = InferenceService.objects.create(project=project, name=name, created_by=user, **fields)
    except IntegrityError:  # a concurrent create took the name
        taken = _("This project already has a service named “%(name)s”.") % {"name": name}
        raise ValidationError({"name": [taken]}) from None
    if deploy:
        deploy_service(service, user)
    elif service.follow_alias:
        try:
            deploy_service(service, user)  # None while the alias points nowhere: it records why it waits
        except ValidationError as exc:
            InferenceService.objects.filter(pk=service.pk).update(reason=" ".join(exc.messages))
    service.refresh_from_db()
    return service


def update_service(service: InferenceService, **values: Any) -> tuple[InferenceService, bool]:
    """Change settings (those left out, or UNCHANGED, stay). Returns (the service, whether a deploy is needed for
    the change to take effect: what the replicas run changed). Scaling and auth apply at once."""
    given = {k: v for k, v in values.items() if v is not UNCHANGED}
    unknown = set(given) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    merged = {**current_settings(service), **given}
    fields = clean_settings(service.project, merged, allow_waiting=service.follow_alias == merged["follow_alias"])
    changed = [key for key, value in fields.items() if getattr(service, key) != value]
    for key in changed:
        setattr(service, key, fields[key])
    if changed:
        service.updated_at = timezone.now()
        service.save(update_fields=[*changed, "updated_at"])
    return service, any(key in DEPLOYED for key in changed)


def free_service_name(project: Project, version: ModelVersion) -> str:
    """A name for a new service of `version`: its model's name when free, else `<model>-v<n>`, else with a number."""
    base = re.sub(r"[^a-z0-9-]+", "-", version.registered_model.name.lower()).strip("-")[:40] or "model"
    taken = set(InferenceService.objects.filter(project=project, name__startswith=base).values_list("name", flat=True))
    for name in (base, f"{base}-v{version.version}", *(f"{base}-v{version.version}-{i}" for i in range(2, 100))):
        if name not in taken:
            return name
    return f"{base}-{timezone.now():%Y%m%d%H%M%S}"


def deploy_version(
    project: Project,
    user: Any,
    version: ModelVersion,
    *,
    service: InferenceService | None = None,
    name: str = "",
    framework: str = "",
) -> InferenceService:
    """ "Deploy this version" from the registry. Without `service`: a new service named `name`, pinned to `version`,
    deployed at once, with `framework` (default: the one the version's files need, `replicas.default_framework`).
    With one (of the same project and model): pinned to `version` (it stops following an alias) and rolled out; what
    serves goes on serving until the new replicas are ready. The service is returned even when the rollout cannot
    start (no agent...), with why (else ""): its page says so too, as after a deploy from there."""
    if version.registered_model.project_id != project.pk:
        raise ValidationError({"version": [_("This version is not in this project.")]})
    if service is None:
        service = create_service(
            project, user, name=name, registered_model=version.registered_model, model_version=version,
            framework=framework or default_framework(version.source),
        )  # fmt: skip
    elif service.project_id != project.pk or service.registered_model_id != version.registered_model_id:
        raise ValidationError({"service": [_("Choose a service of %(model)s.") % {"model": version.registered_model}]})
    else:
        service, _redeploy = update_service(
            service, registered_model=version.registered_model, model_version=version, follow_alias=""
        )
    problem = ""
    try:
        deploy_service(service, user)
    except ValidationError as exc:  # e.g. no agent or capacity: the service stays, saying why
        problem = " ".join(exc.messages)
        InferenceService.objects.filter(pk=service.pk).update(reason=problem)
    service.refresh_from_db()
    return service, problem
