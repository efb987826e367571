"""Bundles for the app store tests: the built-in tabular app as shipped, and small hand-made manifests."""

from __future__ import annotations

import copy
from typing import Any

from apps.appstore import bundle as bundles
from apps.appstore.bundle import BUILTIN_DIR, Bundle
from apps.appstore.models import AppVersion
from apps.appstore.services import add_version
from apps.jobs.builtin import load_builtin_templates


def builtin_version(name: str = "tabular-classification") -> AppVersion:
    load_builtin_templates()
    return add_version(bundles.load_folder(BUILTIN_DIR / name))


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "portal/v1",
        "kind": "App",
        "metadata": {"name": "tiny", "version": "1.0.0", "title": "Tiny", "tags": ["test"]},
        "spec": copy.deepcopy(spec),
    }


def tiny_bundle(version: str = "1.0.0", **spec: Any) -> Bundle:
    """A bundle of one dataset (a CSV file) and one pipeline of a Python step, plus whatever `spec` adds."""
    spec = {
        "datasets": [{"name": "{{ install }}-data", "files": ["data/rows.csv"], "strip": "data/"}],
        "pipelines": [{"name": "{{ install }}", "nodes": [{"name": "hello", "template": "python",
                                                          "args": {"code": "print('hello')"}}]}],
        **spec,
    }  # fmt: skip
    data = manifest(**spec)
    data["metadata"]["version"] = version
    load_builtin_templates()
    return bundles.from_entries(
        {"app.yaml": _yaml(data), "README.md": b"# Tiny\n\nA *small* app.", "data/rows.csv": b"a,b\n1,2\n"}
    )


def _yaml(data: dict[str, Any]) -> bytes:
    import yaml

    return yaml.safe_dump(data).encode()
