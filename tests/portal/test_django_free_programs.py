"""The programs that run outside the portal (docs/apps.md, "Django-free programs") import no Django and nothing of
the portal but their own package: the built-in task scripts run in task environments (locally and in cluster pods),
the model server in its replicas' processes."""

from __future__ import annotations

import json
import subprocess
import sys

from django.conf import settings

PACKAGES = ["apps.jobs.builtin_tasks", "apps.serving.modelserver"]

PROBE = """
import importlib, json, pkgutil, sys
packages = {packages!r}
for name in packages:
    package = importlib.import_module(name)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{{name}}.{{module.name}}")
own = tuple(packages) + ("apps.jobs", "apps.serving", "apps")
print(json.dumps({{
    "django": sorted(m for m in sys.modules if m == "django" or m.startswith("django.")),
    "portal": sorted(m for m in sys.modules if m.split(".")[0] in ("apps", "portal") and not m.startswith(own)
                     and m not in own),
}}))
"""


def test_the_built_in_tasks_and_the_model_server_import_no_django_and_no_portal_code():
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(packages=PACKAGES)],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(settings.BASE_DIR)},
    )

    assert json.loads(result.stdout) == {"django": [], "portal": []}
