"""apps.labeling.convert runs in Label Studio's venv, outside Django: importing it loads no Django, no portal."""

from __future__ import annotations

import json
import subprocess
import sys

from django.conf import settings

PROBE = """
import json, sys
import apps.labeling.convert
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("django", "portal")
                        or m.startswith("apps.") and m not in ("apps.labeling", "apps.labeling.convert"))))
"""


def test_the_converter_program_imports_no_django_and_no_portal_code():
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(settings.BASE_DIR)},
    )
    assert json.loads(result.stdout) == []
