"""Where a notebook's files live: the owner's folder of the project and the project's shared folder.

    PORTAL_WORK_DIR/projects/<project slug>/home/<username>/   the owner's folder: HOME, root of the file browser
    PORTAL_WORK_DIR/projects/<project slug>/shared/            every member's notebooks see it
    PORTAL_WORK_DIR/projects/<project slug>/home/<username>/shared -> ../../shared

The link is relative, so it means the same in a pod, where the cluster's work claim is mounted at PORTAL_WORK_DIR
(apps/runtime/kubernetes/manifests/pod.py). The folders belong to the person, not to one notebook: all of an owner's
notebooks in a project share one folder, and deleting a notebook deletes no file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings

# A username that is safe as one path segment ("..", "a/b" and the like are not: they get "user-<pk>").
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,149}$")
SHARED_LINK = "shared"


def project_dir(project: Any) -> Path:
    return Path(settings.PORTAL_WORK_DIR) / "projects" / project.slug


def shared_dir(project: Any) -> Path:
    return project_dir(project) / "shared"


def home_dir(project: Any, user: Any) -> Path:
    name = user.username if _SAFE_SEGMENT.match(user.username or "") else f"user-{user.pk}"
    return project_dir(project) / "home" / name


def prepare(project: Any, user: Any) -> Path:
    """Create the owner's and the shared folder (idempotent) and link the shared one into the owner's; returns the
    owner's folder. A file or folder the owner made under the name `shared` is left alone (no link then)."""
    home, shared = home_dir(project, user), shared_dir(project)
    home.mkdir(parents=True, exist_ok=True)
    shared.mkdir(parents=True, exist_ok=True)
    link = home / SHARED_LINK
    if not link.exists() and not link.is_symlink():
        os.symlink(os.path.relpath(shared, home), link)
    return home
