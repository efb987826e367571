"""Serving workflows (no HTTP): settings (`config`), deploys and their variants (`deploy`), stop/start/delete and
keys (`lifecycle`), following an alias (`aliases`), and the rollout state machine with its periodic repair
(`rollout`). Pages, the API, tasks and the demo call these."""

from apps.serving.services.aliases import follow_alias
from apps.serving.services.config import create_service, deploy_version, free_service_name, update_service
from apps.serving.services.deploy import (
    deploy,
    deploy_canary,
    deploy_shadow,
    promote_canary,
    resolve_version,
    rollback,
    scale,
    set_traffic,
    withdraw,
)
from apps.serving.services.lifecycle import (
    delete_project_services,
    delete_service,
    rotate_key,
    start_service,
    stop_service,
)
from apps.serving.services.rollout import advance, reconcile

__all__ = [
    "advance", "create_service", "delete_project_services", "delete_service", "deploy", "deploy_canary",
    "deploy_shadow", "deploy_version", "follow_alias", "free_service_name",
    "promote_canary", "reconcile", "resolve_version", "rollback", "rotate_key", "scale", "set_traffic",
    "start_service", "stop_service", "update_service", "withdraw",
]  # fmt: skip
