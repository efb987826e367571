"""The cluster registry: who sees which clusters, saving one (kubeconfig checked), binding projects to them.

Clusters are platform objects: staff create, change and bind them; members of a bound project see them
(never their kubeconfig). Every page, API view and admin goes through these functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils.translation import gettext as _

from apps.projects.models import Project
from apps.projects.permissions import projects_for
from apps.runtime.models import Cluster, Operator, ProjectCluster
from portal.lib import untrusted

if TYPE_CHECKING:
    from apps.accounts.models import ApiToken

# Kubernetes names a namespace with a DNS-1123 label.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Keys of a kubeconfig that point at files: on the portal's machines those files do not exist.
FILE_KEYS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
    "tokenFile": "token",
}


# --- Visibility ---------------------------------------------------------------------------------------


def is_platform_admin(user: Any, token: ApiToken | None = None) -> bool:
    """May create, change and bind clusters: active staff, through a session or a token not limited to a project."""
    staff = bool(getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)
    return staff and (token is None or token.project_id is None)


def visible_projects(user: Any, token: ApiToken | None = None) -> QuerySet[Project]:
    """Projects whose cluster bindings `user` may see: all for staff, else their own (a project token: one)."""
    projects = Project.objects.all() if is_platform_admin(user) else projects_for(user)
    if token is not None and token.project_id is not None:
        projects = projects.filter(pk=token.project_id)
    return projects


def visible_clusters(user: Any, token: ApiToken | None = None) -> QuerySet[Cluster]:
    """Clusters `user` may see: every cluster for staff, else those bound to one of their projects."""
    if is_platform_admin(user, token):
        return Cluster.objects.all()
    bound = ProjectCluster.objects.filter(project__in=visible_projects(user, token)).values("cluster_id")
    return Cluster.objects.filter(pk__in=bound)


def visible_bindings(user: Any, token: ApiToken | None = None) -> QuerySet[ProjectCluster]:
    """Bindings of the projects `user` may see (all for staff): other tenants' project names never show."""
    return ProjectCluster.objects.filter(project__in=visible_projects(user, token)).select_related("project", "cluster")


# --- Kubeconfig ---------------------------------------------------------------------------------------


def _named(entries: Any, what: str) -> dict[str, dict]:
    """{name: body} of a kubeconfig list (clusters, contexts, users); ValidationError when malformed."""
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("name") for e in entries):
        raise ValidationError(
            {"kubeconfig": _("“%(what)s” must be a list of entries, each with a name.") % {"what": what}}
        )
    return {str(e["name"]): e for e in entries}


def load_kubeconfig(text: str) -> dict[str, Any]:
    """The kubeconfig as a mapping; ValidationError on `kubeconfig` when it is not one (never echoes the text)."""
    try:
        data = yaml.load(text, Loader=untrusted.YamlLoader)  # safe, and refuses nesting past its limit
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = _(" (line %(line)d)") % {"line": mark.line + 1} if mark is not None else ""
        raise ValidationError({"kubeconfig": _("Not valid YAML%(where)s.") % {"where": where}}) from None
    if not isinstance(data, dict) or "contexts" not in data:
        raise ValidationError(
            {"kubeconfig": _("A kubeconfig is a YAML mapping with clusters, contexts and users.")}
        ) from None
    return data


def kubeconfig_contexts(text: str) -> list[str]:
    """Names of the contexts a kubeconfig defines (ValidationError when it is not one)."""
    return list(_named(load_kubeconfig(text).get("contexts"), "contexts"))


def check_kubeconfig(text: str, context: str = "") -> str:
    """Check that `text` can reach a cluster through `context` (empty: its current-context) without files from
    this machine. Returns the context that will be used; ValidationError keyed `kubeconfig` or `context`."""
    data = load_kubeconfig(text)
    contexts = _named(data.get("contexts"), "contexts")
    if not contexts:
        raise ValidationError({"kubeconfig": _("The kubeconfig defines no contexts.")})
    names = ", ".join(sorted(contexts))
    chosen = context or str(data.get("current-context") or "")
    if not chosen:
        raise ValidationError(
            {"context": _("The kubeconfig has no current-context; name one of: %(names)s.") % {"names": names}}
        )
    if chosen not in contexts:
        field = "context" if context else "kubeconfig"
        message = _("No context “%(name)s” in the kubeconfig (it has: %(names)s).")
        raise ValidationError({field: message % {"name": chosen, "names": names}})
    body = contexts[chosen].get("context") or {}
    cluster_name, user_name = body.get("cluster"), body.get("user")
    clusters = _named(data.get("clusters"), "clusters")
    if cluster_name not in clusters:
        message = _("Context “%(context)s” uses cluster “%(cluster)s”, which the kubeconfig does not define.")
        raise ValidationError({"kubeconfig": message % {"context": chosen, "cluster": cluster_name or ""}})
    server_entry = clusters[cluster_name].get("cluster") or {}
    server = str(server_entry.get("server") or "")
    if not server.startswith(("https://", "http://")):
        message = _("Cluster “%(cluster)s” has no server address (https://…).")
        raise ValidationError({"kubeconfig": message % {"cluster": cluster_name}})
    entries = [server_entry]
    if user_name:
        users = _named(data.get("users"), "users")
        if user_name not in users:
            message = _("Context “%(context)s” uses user “%(user)s”, which the kubeconfig does not define.")
            raise ValidationError({"kubeconfig": message % {"context": chosen, "user": user_name}})
        entries.append(users[user_name].get("user") or {})
    for entry in entries:
        for key, inline in FILE_KEYS.items():
            if entry.get(key):
                message = _("“%(key)s” points at a file the portal cannot read; paste its content as “%(inline)s”.")
                raise ValidationError({"kubeconfig": message % {"key": key, "inline": inline}})
    return chosen


# --- Saving a cluster ---------------------------------------------------------------------------------


@cache
def supported_versions() -> tuple[str, ...]:
    """Kubernetes minor versions whose schemas kubernetes-validate ships (objects are validated against one)."""
    from kubernetes_validate.utils import all_versions, major_minor

    return tuple(dict.fromkeys(major_minor(v) for v in all_versions()))


def _string_map_error(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return _('Give a JSON object of strings, e.g. {"key": "value"}.')
    return None


def validate_cluster(cluster: Cluster, kubeconfig: str | None = None) -> None:
    """Raise ValidationError (every problem, keyed by field) unless `cluster`, its fields set, may be saved with
    the new `kubeconfig` (None or empty: keep the stored one)."""
    errors: dict[str, list[str]] = {}
    try:
        cluster.full_clean(exclude=["kubeconfig", "inventory", "inventory_at"])
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            errors.setdefault(field, []).extend(messages)
    if cluster.version not in supported_versions():
        versions = supported_versions()
        message = _("Kubernetes %(version)s cannot be validated against; use one of %(first)s … %(last)s.")
        errors.setdefault("version", []).append(
            message % {"version": cluster.version, "first": versions[0], "last": versions[-1]}
        )
    known = ", ".join(Operator.values)
    if not isinstance(cluster.operators, list):
        errors.setdefault("operators", []).append(_("Give a list of operators (known: %(known)s).") % {"known": known})
    elif unknown := [o for o in cluster.operators if o not in Operator.values]:
        message = _("Unknown operator %(name)s (known: %(known)s).")
        errors.setdefault("operators", []).append(message % {"name": unknown[0], "known": known})
    for field in ("node_selector", "vgpu_resources"):
        message = _string_map_error(getattr(cluster, field))
        if message:
            errors.setdefault(field, []).append(message)
    if not DNS_LABEL.match(cluster.default_namespace or ""):
        errors.setdefault("default_namespace", []).append(_namespace_message())
    if cluster.pack_scheduler_name and not DNS_SUBDOMAIN.match(cluster.pack_scheduler_name):
        # What the API server checks in a pod's spec.schedulerName.
        message = _("A scheduler name is lower-case letters, digits, “-” and “.”, e.g. portal-binpack.")
        errors.setdefault("pack_scheduler_name", []).append(message)
    if cluster.in_cluster:
        if kubeconfig:
            message = _("An in-cluster connection uses the portal's service account; leave the kubeconfig empty.")
            errors.setdefault("kubeconfig", []).append(message)
    else:
        text = kubeconfig or (cluster.kubeconfig if cluster.pk else "")
        if not text:
            errors.setdefault("kubeconfig", []).append(_("Paste a kubeconfig, or connect in-cluster."))
        else:
            try:
                check_kubeconfig(text, cluster.context)
            except ValidationError as exc:
                for field, messages in exc.message_dict.items():
                    errors.setdefault(field, []).extend(messages)
    if errors:
        raise ValidationError(errors)


def save_cluster(cluster: Cluster | None = None, *, kubeconfig: str | None = None, **fields: Any) -> Cluster:
    """Create (`cluster` None) or change a cluster. `kubeconfig` None or empty keeps the stored one; an in-cluster
    connection drops it. Nothing is saved when anything is invalid (ValidationError keyed by field)."""
    cluster = cluster if cluster is not None else Cluster()
    for name, value in fields.items():
        setattr(cluster, name, value)
    validate_cluster(cluster, kubeconfig)
    if cluster.in_cluster:
        cluster.kubeconfig = ""
    elif kubeconfig:
        cluster.kubeconfig = kubeconfig
    with transaction.atomic():
        cluster.save()
    return cluster


def delete_cluster(cluster: Cluster) -> None:
    """Delete a cluster and its bindings; refused while workload records point at it (they keep its history)."""
    count = cluster.workloads.count()
    if count:
        message = _("%(count)d workloads ran on cluster “%(name)s”; disable it instead of deleting it.")
        raise ValidationError(message % {"count": count, "name": cluster.name})
    cluster.delete()


# --- Project bindings ---------------------------------------------------------------------------------


def _namespace_message() -> str:
    return _("A namespace is a DNS label: lower-case letters, digits and “-”, at most 63 characters.")


def bind_project(
    project: Project, cluster: Cluster, *, namespace: str = "", is_default: bool = False
) -> ProjectCluster:
    """Let `project` run on `cluster` in `namespace` (empty: the cluster's default), or change that binding.

    A project with bindings has exactly one default: asking for it moves it here, and a project without another
    default gets this one as its default whatever was asked.
    """
    if namespace and (len(namespace) > 63 or not DNS_LABEL.match(namespace)):
        raise ValidationError({"namespace": _namespace_message()})
    with transaction.atomic():
        bindings = ProjectCluster.objects.select_for_update().filter(project=project)
        others = bindings.exclude(cluster=cluster)
        if not others.filter(is_default=True).exists():
            is_default = True
        elif is_default:
            others.update(is_default=False)
        binding, _created = ProjectCluster.objects.update_or_create(
            project=project, cluster=cluster, defaults={"namespace": namespace, "is_default": is_default}
        )
    return binding


def unbind_project(binding: ProjectCluster) -> None:
    """Remove a binding; when it was the default, the project's next binding (by cluster name) becomes it."""
    with transaction.atomic():
        project = binding.project
        binding.delete()
        rest = ProjectCluster.objects.select_for_update().filter(project=project).order_by("cluster__name")
        if not rest.filter(is_default=True).exists():
            first = rest.first()
            if first is not None:
                ProjectCluster.objects.filter(pk=first.pk).update(is_default=True)


def project_bindings(project: Project) -> QuerySet[ProjectCluster]:
    """The clusters a project may run on, the default first."""
    return ProjectCluster.objects.filter(project=project).select_related("cluster")


# --- Inventory (written by the controller: see Cluster.inventory) ----------------------------------------


@dataclass
class Usage:
    """One resource summed over nodes. `free` counts only nodes the portal's pods can use: ready, schedulable and
    matching the cluster's node selector (as the queue's capacity does, apps.runtime.kubernetes.capacity)."""

    allocatable: float = 0.0
    requested: float = 0.0
    free: float = 0.0

    @property
    def percent(self) -> int:
        """Requested share of allocatable, for the bars (capped at 100: over-commit shows as full)."""
        return min(100, round(100 * self.requested / self.allocatable)) if self.allocatable > 0 else 0

    def add(self, other: Usage) -> None:
        self.allocatable += other.allocatable
        self.requested += other.requested
        self.free += other.free


@dataclass
class NodeRow:
    name: str
    group: str
    gpu_type: str
    ready: bool
    schedulable: bool
    selected: bool
    pods: int
    cpu: Usage
    memory: Usage
    gpu: Usage


@dataclass
class Totals:
    """Nodes of one resource group or one GPU type, summed."""

    key: str
    nodes: int = 0
    ready: int = 0
    cpu: Usage = field(default_factory=Usage)
    memory: Usage = field(default_factory=Usage)
    gpu: Usage = field(default_factory=Usage)

    def add(self, node: NodeRow) -> None:
        self.nodes += 1
        self.ready += int(node.ready)
        self.cpu.add(node.cpu)
        self.memory.add(node.memory)
        self.gpu.add(node.gpu)


@dataclass
class InventorySummary:
    nodes: list[NodeRow]
    groups: list[Totals]
    gpu_types: list[Totals]
    total: Totals
    error: str
    refreshed_at: datetime | None

    @property
    def never_refreshed(self) -> bool:
        return self.refreshed_at is None


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number > 0 else 0.0


def _usage(node: dict[str, Any], key: str, usable: bool) -> Usage:
    allocatable = _number((node.get("allocatable") or {}).get(key))
    requested = _number((node.get("requested") or {}).get(key))
    return Usage(allocatable, requested, max(0.0, allocatable - requested) if usable else 0.0)


def summarize_inventory(cluster: Cluster) -> InventorySummary:
    """The controller's last reading of the cluster's nodes, with totals per resource group and GPU type.

    Tolerant of a partial inventory (missing keys read as 0/empty): a page must render whatever was written.
    """
    inventory = cluster.inventory if isinstance(cluster.inventory, dict) else {}
    nodes: list[NodeRow] = []
    for raw in inventory.get("nodes") or []:
        if not isinstance(raw, dict):
            continue
        ready, schedulable = bool(raw.get("ready")), bool(raw.get("schedulable", True))
        # `selected`: the node matches the cluster's node selector (the portal's pods can land there).
        selected = bool(raw.get("selected", True))
        usable = ready and schedulable and selected
        nodes.append(
            NodeRow(
                name=str(raw.get("name") or "?"),
                group=str(raw.get("group") or ""),
                gpu_type=str(raw.get("gpu_type") or ""),
                ready=ready,
                schedulable=schedulable,
                selected=selected,
                pods=int(_number(raw.get("pods"))),
                cpu=_usage(raw, "cpu", usable),
                memory=_usage(raw, "memory_bytes", usable),
                gpu=_usage(raw, "gpu", usable),
            )
        )
    nodes.sort(key=lambda n: (n.group, n.name))
    groups: dict[str, Totals] = {}
    gpu_types: dict[str, Totals] = {}
    total = Totals(key="")
    for node in nodes:
        total.add(node)
        groups.setdefault(node.group, Totals(key=node.group)).add(node)
        if node.gpu.allocatable > 0:
            gpu_types.setdefault(node.gpu_type, Totals(key=node.gpu_type)).add(node)
    return InventorySummary(
        nodes=nodes,
        groups=[groups[k] for k in sorted(groups)],
        gpu_types=[gpu_types[k] for k in sorted(gpu_types)],
        total=total,
        error=str(inventory.get("error") or ""),
        refreshed_at=cluster.inventory_at,
    )
