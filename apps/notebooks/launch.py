"""A notebook server as a Workload of kind "notebook": the command, its env contract and where it runs.

Locally the server listens on a free loopback port; on a cluster on 0.0.0.0:8888 inside its pod, behind a Service.
Either way its base URL is the proxied path (`/notebook/<pk>/`), so no link needs rewriting, and its token comes
in the env (JUPYTER_TOKEN), not on the command line, where every local user could read it in the process list.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings

from apps.runtime.base import get_runtime, site_url
from apps.runtime.kubernetes.manifests.meta import object_name
from apps.runtime.workload import Resources, Workload

CLUSTER_PORT = 8888

# Nothing may reach the network on its own: no news feed, no update check, no extension manager that asks PyPI.
QUIET_FLAGS = [
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.extension_manager=readonly",
]


@dataclass(frozen=True)
class Placement:
    """Where a server goes: the runtime, and on Kubernetes the cluster and namespace."""

    runtime: str
    cluster: str = ""
    namespace: str = ""


def jupyter_command(*, ip: str, port: int, base_path: str, root_dir: Path) -> list[str]:
    return [
        "{python:notebook}", "-m", "jupyterlab", "--no-browser", "--ip", ip, "--port", str(port),
        f"--ServerApp.base_url={base_path}", f"--ServerApp.root_dir={root_dir}", "--allow-root", *QUIET_FLAGS,
    ]  # fmt: skip


def code_server_command(*, ip: str, port: int, root_dir: Path) -> list[str]:
    """code-server has no token header: it listens on loopback only and the portal's proxy is its only door."""
    return [
        settings.PORTAL_CODE_SERVER, "--bind-addr", f"{ip}:{port}", "--auth", "none",
        "--disable-telemetry", "--disable-update-check", str(root_dir),
    ]  # fmt: skip


def notebook_env(notebook, *, home: Path, token: str, api_token: str, on_cluster: bool = False) -> dict[str, str]:
    """The env contract of a notebook: its folders, and a project token for the portal API and MLflow tracking, so
    that `mlflow.log_metric(...)` in a cell lands in the project's experiments (the default one unless named).
    A pod gets the cluster-facing URL, never this host's loopback one (none when there is no such URL)."""
    site = site_url(on_cluster)
    env = {
        "HOME": str(home),
        "JUPYTER_TOKEN": token,
        "PORTAL_PROJECT": notebook.project.slug,
        "PORTAL_NOTEBOOK": str(notebook.pk),
        "PORTAL_SHARED_DIR": str(home / "shared"),
        "PORTAL_API_TOKEN": api_token,
        "MLFLOW_TRACKING_TOKEN": api_token,
    }
    if site:
        env.update({"PORTAL_API_URL": f"{site}/api/v1/", "MLFLOW_TRACKING_URI": site})
    shell = shutil.which("bash") or os.environ.get("SHELL", "")
    if shell:  # JupyterLab's terminals start $SHELL (else sh)
        env["SHELL"] = shell
    return env


def build_workload(
    notebook, placement: Placement, *, home: Path, port: int, token: str, api_token: str
) -> tuple[Workload, str]:
    """(the workload, the upstream URL the proxy and the culler reach the server at). No side effects."""
    on_cluster = get_runtime(placement.runtime).on_cluster
    ip, port = ("0.0.0.0", CLUSTER_PORT) if on_cluster else ("127.0.0.1", port)  # all interfaces of its own pod
    if notebook.ide == notebook.Ide.VSCODE:
        command = code_server_command(ip=ip, port=port, root_dir=home)
    else:
        command = jupyter_command(ip=ip, port=port, base_path=notebook.base_path, root_dir=home)
    project = notebook.project
    workload = Workload(
        uid=notebook.workload_uid,
        name=f"{project.slug}-notebook-{notebook.name}",
        project=project.slug,
        command=command,
        kind="notebook",
        image=notebook.image or settings.PORTAL_NOTEBOOK_IMAGE,
        env=notebook_env(notebook, home=home, token=token, api_token=api_token, on_cluster=on_cluster),
        workdir=str(home),
        resources=Resources(
            cpu=float(Decimal(notebook.cpu)),
            memory_bytes=int(notebook.memory_bytes) or None,
            gpu=float(Decimal(notebook.gpu)),
        ),
        labels={"notebook": str(notebook.pk), "project": project.slug, "owner": notebook.owner.username},
        ports={"http": port},
        cluster=placement.cluster,
        namespace=placement.namespace,
    )
    if on_cluster:
        upstream = f"http://{object_name(workload)}.{placement.namespace}.svc:{CLUSTER_PORT}"
    else:
        upstream = f"http://127.0.0.1:{port}"
    return workload, upstream
