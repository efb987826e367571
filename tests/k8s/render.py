"""Render the kustomize overlays in k8s/ with `kubectl kustomize` and look things up in the result.

kubectl is not a Python package: without it the render tests skip, except under CI (env var CI set), where
a missing kubectl is a failure, never a silent pass (.ci/run makes sure it is there).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")
NAMESPACES = {"dev": "mlops-portal-dev", "prod": "mlops-portal"}
PORTAL_IMAGE = "mlops-portal"  # the name base/ uses; overlays give it a registry and a tag

Obj = dict[str, Any]


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("kubectl is not on PATH: CI must render k8s/overlays (see ensure_kubectl in .ci/run)")
    pytest.skip("kubectl is not on PATH, so the kustomize overlays cannot be rendered here (CI renders them)")


@functools.cache
def _render(binary: str, overlay: str) -> tuple[Obj, ...]:
    done = subprocess.run(
        [binary, "kustomize", str(REPO / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize k8s/overlays/{overlay} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(overlay: str) -> list[Obj]:
    """The overlay's objects as dicts (a fresh list each call; the objects are shared, do not mutate them)."""
    return list(_render(kubectl(), overlay))


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in of_kind(objs, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def generated(objs: list[Obj], kind: str, prefix: str) -> Obj:
    """A generator's object (ConfigMap/Secret), whose name carries a content hash suffix."""
    found = [o for o in of_kind(objs, kind) if o["metadata"]["name"].startswith(prefix + "-")]
    assert len(found) == 1, f"expected one generated {kind} {prefix}-<hash>, found {len(found)}"
    return found[0]


def pod_templates(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(owner, pod template) for every Deployment, StatefulSet and Job."""
    for obj in objs:
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            yield obj, obj["spec"]["template"]


def containers(template: Obj, *, init: bool = True) -> list[Obj]:
    spec = template["spec"]
    return list(spec.get("initContainers", []) if init else []) + list(spec["containers"])


def portal_templates(objs: list[Obj]) -> list[tuple[Obj, Obj]]:
    """Pods that run the portal's own image (not PostgreSQL or Redis)."""
    return [
        (owner, tpl)
        for owner, tpl in pod_templates(objs)
        if tpl["metadata"]["labels"].get("app.kubernetes.io/name") == "mlops-portal"
    ]


def config(objs: list[Obj]) -> dict[str, str]:
    return generated(objs, "ConfigMap", "portal-config")["data"]


def image_parts(image: str) -> tuple[str, str, str]:
    """(name, tag, digest) of an image reference; a registry port is not a tag."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = ""
    if ":" in last:
        tag = last.rsplit(":", 1)[1]
        name = name[: -len(tag) - 1]
    return name, tag, digest
