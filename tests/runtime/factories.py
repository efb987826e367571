"""Clusters for tests: a kubeconfig with a recognisable secret, bindings, and inventories as the controller
writes them (see Cluster.inventory)."""

from __future__ import annotations

import secrets
from typing import Any

import factory
import yaml
from django.utils import timezone

from apps.runtime import services
from apps.runtime.models import Cluster, ProjectCluster

CA_DATA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUQ="


def kubeconfig_yaml(
    *,
    server: str = "https://10.0.0.1:6443",
    token: str | None = None,
    contexts: tuple[str, ...] = ("lab-admin",),
    current: str | None = "lab-admin",
    **user: Any,
) -> str:
    """A kubeconfig for one cluster and one user (a bearer token unless `user` says otherwise)."""
    data: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": CA_DATA}}],
        "contexts": [{"name": name, "context": {"cluster": "lab", "user": "admin"}} for name in contexts],
        "users": [{"name": "admin", "user": user or {"token": token or secret_token()}}],
    }
    if current is not None:
        data["current-context"] = current
    return yaml.safe_dump(data, sort_keys=False)


def secret_token() -> str:
    return f"kube-token-{secrets.token_hex(16)}"


class ClusterFactory(factory.django.DjangoModelFactory):
    """A registered cluster with a valid kubeconfig (its bearer token is unique per cluster)."""

    class Meta:
        model = Cluster
        django_get_or_create = ["name"]

    name = factory.Sequence(lambda n: f"cluster-{n}")
    description = ""
    kubeconfig = factory.LazyFunction(kubeconfig_yaml)
    version = "1.33"
    operators = factory.LazyFunction(list)


def bind(cluster: Cluster, project: Any, namespace: str = "", is_default: bool = False) -> ProjectCluster:
    return services.bind_project(project, cluster, namespace=namespace, is_default=is_default)


def node(
    name: str,
    *,
    group: str = "",
    gpu_type: str = "",
    ready: bool = True,
    schedulable: bool = True,
    selected: bool = True,
    cpu: tuple[float, float] = (8.0, 2.0),
    memory: tuple[int, int] = (32 * 2**30, 4 * 2**30),
    gpu: tuple[float, float] = (0.0, 0.0),
    pods: int = 3,
) -> dict[str, Any]:
    """One node of an inventory: (allocatable, requested) per resource."""
    return {
        "name": name,
        "group": group,
        "gpu_type": gpu_type,
        "ready": ready,
        "schedulable": schedulable,
        "selected": selected,
        "allocatable": {"cpu": cpu[0], "memory_bytes": memory[0], "gpu": gpu[0]},
        "requested": {"cpu": cpu[1], "memory_bytes": memory[1], "gpu": gpu[1]},
        "pods": pods,
    }


def set_inventory(cluster: Cluster, nodes: list[dict[str, Any]], error: str = "", at: Any = "now") -> Cluster:
    """Write an inventory as the controller does (`at` None: never refreshed successfully)."""
    cluster.inventory = {"nodes": nodes, "error": error}
    cluster.inventory_at = timezone.now() if at == "now" else at
    cluster.save(update_fields=["inventory", "inventory_at"])
    return cluster
