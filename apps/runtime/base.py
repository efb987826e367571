"""The Runtime interface. `local` (processes on this machine) and `kubernetes` implement it."""

from __future__ import annotations

import ipaddress
import socket
from abc import ABC, abstractmethod
from functools import cache
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.module_loading import import_string

from apps.runtime.workload import Capacity, Status, Workload

RUNTIMES = {
    "local": "apps.runtime.local.runtime.LocalRuntime",
    "kubernetes": "apps.runtime.kubernetes.runtime.KubernetesRuntime",
}


def is_loopback_url(url: str) -> bool:
    """Whether `url` names this machine only (localhost, 127.0.0.0/8, ::1): useless to a pod."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cluster_site_url() -> str:
    """Where pods on a cluster reach the portal's API and tracking API, without a trailing slash:
    PORTAL_CLUSTER_URL, else SITE_URL when it is not a loopback address; "" when neither is usable (the pods then
    get no URL rather than one that points at themselves, and a dry run says so)."""
    for url in (settings.PORTAL_CLUSTER_URL, settings.SITE_URL):
        if url and not is_loopback_url(url):
            return url.rstrip("/")
    return ""


def site_url(on_cluster: bool) -> str:
    """Where a workload reaches the portal's API, without a trailing slash: this host's SITE_URL for a local process,
    the cluster-facing URL for a pod (never this host's loopback one; "" when there is none, see cluster_site_url)."""
    return cluster_site_url() if on_cluster else settings.SITE_URL.rstrip("/")


def send_wakeups(addresses: list[str]) -> None:
    """A "wake" datagram to each host:port (best effort: agents and controllers also look for work each second)."""
    for address in addresses:
        host, _sep, port = address.rpartition(":")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"wake", (host, int(port)))
        except (OSError, ValueError):
            continue


class Runtime(ABC):
    """Every method a caller may use is declared here, with a default where a backend may leave it out: callers
    never probe a runtime for a method, nor compare its name to decide what it can do."""

    name: str
    #: Where workloads run and how they are reached. False: processes on this machine, each listening on 127.0.0.1
    #: at a port the submitter picks (free here) and declares, one process group per workload, probed by the portal.
    #: True: pods on a cluster, reached through the Service the runtime makes for a workload's ports at the port it
    #: names; a workload with a `service` spec stands for all its replicas (the cluster scales and probes them).
    on_cluster: bool = False
    #: Whether the queue may preempt its workloads (borrowing above quota, apps/jobs/borrowing.py): `cancel` frees the
    #: room at once and the runtime then reports the workload CANCELLED, after which the orchestrator requeues the
    #: task as a new attempt. Only the simulated runtime says so: the local agent and the Kubernetes controller free
    #: the room only once the process or the pods are gone, and preemption was not tried against them.
    can_preempt: bool = False

    @abstractmethod
    def submit(self, workload: Workload) -> str:
        """Start the workload; returns a handle. Submitting the same uid again returns the same handle."""

    def submit_many(self, workloads: list[Workload]) -> list[str]:
        """`submit` for several workloads (backends override it with one round trip); handles in order."""
        return [self.submit(workload) for workload in workloads]

    @abstractmethod
    def poll(self, handle: str) -> Status:
        """The workload's phase, exit code and reason."""

    def poll_many(self, handles: list[str]) -> dict[str, Status]:
        """`poll` for several workloads at once (backends override it with one round trip)."""
        return {handle: self.poll(handle) for handle in handles}

    @abstractmethod
    def cancel(self, handle: str) -> None:
        """Stop the workload (its whole process tree / all its pods). Idempotent."""

    def ready(self) -> bool:
        """Whether the runtime can take work now (backends answer it more cheaply than `capacity`)."""
        return self.capacity() is not None

    @abstractmethod
    def capacity(self) -> Capacity | None:
        """Free and total resources, or None when the runtime cannot currently take work (agent down)."""

    def repair(self) -> int:
        """Record the end of workloads whose supervisor died with them (the reconcile loops of runs and services call
        it before they poll); returns how many. Default: nothing to repair (a runtime whose own controller keeps
        every workload's state level-triggered)."""
        return 0


@cache
def get_runtime(name: str | None = None) -> Runtime:
    name = name or settings.PORTAL_RUNTIME
    try:
        return import_string(RUNTIMES[name])()
    except KeyError:
        raise LookupError(f"unknown runtime {name!r}; known: {', '.join(RUNTIMES)}") from None
