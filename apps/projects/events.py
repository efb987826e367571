"""Live events of a project's pages: what the notebook and service pages follow over `ws/projects/<slug>/events/`
(apps/projects/consumers.py) instead of polling.

An event says that something of the project changed and how it is now (`kind`, `id`, `status`, ...); the pages
re-fetch their own server-rendered fragment when one concerns them, so what they show is always drawn by the
server with the viewer's permissions. Publishing is best effort: the state is in the database, and a page that
(re)connects fetches it.
"""

from __future__ import annotations

import logging
from typing import Any

from portal.lib.publish import publish

logger = logging.getLogger(__name__)

EVENT_TYPE = "project.event"  # the consumer's handler: project_event()


def project_group(project_id: int) -> str:
    """The Channels group of a project's live events (`<app>.<model>.<pk>`)."""
    return f"projects.project.{project_id}"


def publish_event(project_id: int, kind: str, object_id: int, **fields: Any) -> None:
    """Tell the project's open pages that object `object_id` of `kind` ("notebook", "service") changed."""
    message = {**fields, "type": EVENT_TYPE, "kind": kind, "id": object_id}
    try:
        publish(project_group(project_id), message)
    except Exception:  # the state is stored; a page gets it when it (re)connects or re-fetches
        logger.warning("could not publish a %s event of project %s", kind, project_id, exc_info=True)
