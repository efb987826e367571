"""Making a KubeWorkload real (the apply task's work, apps/runtime/tasks.py): build, validate, create (409 → adopt
what is ours), or fail cleanly.

Crash safety comes from the order of writes. `applied` (the objects about to be created) is saved *before*
the first create, in a conditional UPDATE that also checks the row is still pending and not cancelled, and
`created` only after the last one. A worker killed in between leaves `applied` set and `created` unset: the
task runs again, gets 409 for what exists and adopts it (its LABEL_UID label is this workload's), so a
workload never ends up with two sets of objects. `KubernetesRuntime.cancel` cancels a row at once only
while `applied` is still empty, i.e. while nothing can exist on the cluster.

Registry credentials: a workload whose labels carry `image` (the pk of an `apps.jobs.models.Image` with
registry credentials) and whose `image_pull_secrets` name `registry_secret_name(pk)` gets that Secret
(type kubernetes.io/dockerconfigjson) created or updated in its namespace before its pods; the jobs app reads the
credentials when the workload is applied (`hooks.register_registry_credentials`). The Secret is
shared by every workload of the image, so it is not part of `applied` and outlives them.

Project secrets: env entries that reference one (`${secret:NAME}`) are `secretKeyRef`s in the pods (see
manifests.pod.env_of); their values go into an Opaque Secret of the workload's own (`env_secret_name`), resolved
here, in the worker's memory, and created before the pods that read it. It is listed last in `applied`
(the primary object stays first), so it is adopted, rolled back and deleted with the workload's other objects.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from apps.runtime import hooks
from apps.runtime.kubernetes.client import SECRET, KubeClient, KubeError, KubeUnavailable
from apps.runtime.kubernetes.manifests import (
    LABEL_MANAGED,
    LABEL_UID,
    MANAGED_BY,
    ManifestError,
    build,
    label_value,
    resource_of,
)
from apps.runtime.kubernetes.manifests.meta import env_secret_name, registry_secret_name, workload_labels
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.kubernetes.validation import ManifestInvalid, validate_all
from apps.runtime.models import KubeWorkload
from apps.runtime.workload import Workload
from portal.lib import sealed

log = logging.getLogger("portal.kube")

DOCKER_HUB = "https://index.docker.io/v1/"


class ApplyFailed(Exception):
    """The workload cannot be created (it fails with this message); what this attempt created is deleted."""


def ref(obj: dict[str, Any]) -> dict[str, str]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"]}


def plan(row: KubeWorkload) -> list[dict[str, Any]]:
    """The validated objects of a row (primary first). ApplyFailed when they cannot be built or are invalid."""
    workload = Workload.from_dict(row.spec)
    profile = ClusterProfile.of(row.cluster, row.namespace)
    try:
        objs = build(workload, profile)
        validate_all(objs, profile.version)
    except (ManifestError, ManifestInvalid) as exc:
        raise ApplyFailed(str(exc)) from None
    for obj in objs:
        obj.setdefault("metadata", {})["namespace"] = row.namespace
    return objs


def pull_secret(workload: Workload, namespace: str) -> dict[str, Any] | None:
    """The dockerconfigjson Secret of the workload's image, when its credentials are known (see module doc)."""
    image_pk = workload.labels.get("image")
    if not image_pk or registry_secret_name(image_pk) not in workload.image_pull_secrets:
        return None
    found = hooks.registry_credentials("image", image_pk)  # read from the jobs app's Image, as it is now
    if found is None or not found.username:
        return None
    registry = found.registry or _registry_of(found.image)
    auth = base64.b64encode(f"{found.username}:{found.password}".encode()).decode()
    config = {"auths": {registry: {"username": found.username, "password": found.password, "auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": registry_secret_name(image_pk),
            "namespace": namespace,
            "labels": {LABEL_MANAGED: MANAGED_BY},
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def env_secret(workload: Workload, namespace: str) -> dict[str, Any] | None:
    """The workload's env Secret with the values of the project secrets its env references and of its sealed
    tokens (portal/lib/sealed.py), or None when it has neither. ApplyFailed when a project secret was deleted since
    the task was dispatched, or a token's key is gone (its pods could not start)."""
    from apps.projects.secrets import resolve_env  # the values are read here, where the workload is applied

    values, missing = resolve_env(workload.project, workload.env)
    if missing:
        raise ApplyFailed(f"project secret(s) {', '.join(missing)} no longer exist; the task cannot start without them")
    tokens = sealed.resolve_env(workload.env)
    unresolved = sorted(k for k, v in workload.env.items() if sealed.is_reference(v) and k not in tokens)
    if unresolved:
        raise ApplyFailed(f"{', '.join(unresolved)}: sealed with a key no longer configured (SECRET_KEY was rotated)")
    values.update(tokens)
    if not values:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": env_secret_name(workload),
            "namespace": namespace,
            "labels": workload_labels(workload),
        },
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in values.items()},
    }


def owned_by(client: KubeClient, secret: dict[str, Any], owner: dict[str, Any], uid: str) -> None:
    """Make the workload's primary object (`owner`, whose uid the API server gave) the owner of its env Secret:
    Kubernetes' garbage collector then deletes the Secret with the object (at its TTL after finishing, or when the
    portal deletes it)."""
    if not uid:
        return
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": uid,
    }
    meta = secret["metadata"]
    client.patch(SECRET, meta["namespace"], meta["name"], {"metadata": {"ownerReferences": [reference]}})


def _registry_of(image: str) -> str:
    """The registry host of an image reference ("registry.example.com/team/x:1" → the host; "python:3" →
    Docker Hub), as the kubelet decides it."""
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def ensure_secret(client: KubeClient, secret: dict[str, Any]) -> None:
    """Create the Secret, or bring an existing one up to date (a changed password)."""
    meta = secret["metadata"]
    try:
        client.create(SECRET, meta["namespace"], secret)
        return
    except KubeError as exc:
        if not exc.conflict:
            raise
    existing = client.get(SECRET, meta["namespace"], meta["name"])
    if existing.get("data") != secret["data"] or existing.get("type") != secret["type"]:
        if existing.get("type") != secret["type"]:
            # The type of a Secret is immutable: replace it whole.
            client.delete(SECRET, meta["namespace"], meta["name"], propagation="Background")
            client.create(SECRET, meta["namespace"], secret)
            return
        updated = {**secret, "metadata": {**meta, "resourceVersion": existing["metadata"]["resourceVersion"]}}
        client.replace(SECRET, meta["namespace"], meta["name"], updated)


@dataclass
class Outcome:
    """What an apply did: "created" (every object exists now), "cancelled" (the row was cancelled before
    anything was created), "failed" (`reason`; nothing of this workload is left on the cluster)."""

    result: str
    reason: str = ""
    adopted: list[str] = field(default_factory=list)


def apply(client: KubeClient, row: KubeWorkload) -> Outcome:
    """Create the row's objects. KubeUnavailable (the cluster cannot be reached now) propagates: the row stays
    pending and the next pass tries again, adopting what this one created."""
    workload = Workload.from_dict(row.spec)
    try:
        objs = plan(row)
        env = env_secret(workload, row.namespace)
        if env is not None:
            validate_all([env], ClusterProfile.of(row.cluster, row.namespace).version)
    except (ApplyFailed, ManifestInvalid) as exc:
        return Outcome("failed", str(exc))
    refs = [ref(obj) for obj in objs] + ([ref(env)] if env is not None else [])
    if env is not None:
        objs = [env, *objs]  # created first: the pods read it
    # The intent first: from here on a cancel goes through the controller (see the module doc).
    intent = KubeWorkload.objects.filter(pk=row.pk, state=KubeWorkload.State.PENDING, cancel_requested=False)
    if not intent.update(applied=refs):
        return Outcome("cancelled")
    row.applied = refs
    expected = label_value(row.uid)
    mine: list[dict[str, Any]] = []
    adopted: list[str] = []
    try:
        secret = pull_secret(workload, row.namespace)
        if secret is not None:
            ensure_secret(client, secret)
        for obj in objs:
            resource = resource_of(obj["apiVersion"], obj["kind"])
            try:
                created = client.create(resource, row.namespace, obj)
            except KubeError as exc:
                if not exc.conflict:
                    raise
                existing = client.get(resource, row.namespace, obj["metadata"]["name"])
                owner = (existing.get("metadata", {}).get("labels") or {}).get(LABEL_UID)
                if owner != expected:
                    raise ApplyFailed(
                        f"a {obj['kind']} named {obj['metadata']['name']!r} already exists in namespace "
                        f"{row.namespace!r} on cluster {row.cluster.name!r} and is not this workload's "
                        f"(its {LABEL_UID} label is {owner!r}); delete or rename it"
                    ) from None
                adopted.append(f"{obj['kind']}/{obj['metadata']['name']}")
                created = existing
            mine.append(obj)
            if env is not None and len(mine) == 2:  # the primary object: the env Secret goes when it goes
                owned_by(client, env, obj, (created.get("metadata") or {}).get("uid", ""))
    except KubeUnavailable:
        raise
    except (ApplyFailed, KubeError) as exc:
        # A refusal (403, 404 for a missing CRD, 422 …) or a foreign object: fail, leaving nothing behind.
        left = _undo(client, row.namespace, mine)
        KubeWorkload.objects.filter(pk=row.pk).update(applied=[ref(obj) for obj in left])
        return Outcome("failed", str(exc))
    # Not when it was cancelled meanwhile: the delete task may already have deleted what `applied` listed.
    done = KubeWorkload.objects.filter(pk=row.pk, state=KubeWorkload.State.PENDING, cancel_requested=False).update(
        created=True
    )
    if not done:
        log.info("%s ended while it was applied; its objects go again", row.uid)
        left = _undo(client, row.namespace, mine)
        KubeWorkload.objects.filter(pk=row.pk).update(applied=[ref(obj) for obj in left])
        return Outcome("cancelled")
    row.created = True
    return Outcome("created", adopted=adopted)


def _undo(client: KubeClient, namespace: str, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Delete `objs` (this workload's own); returns those that could not be deleted (they stay in `applied`)."""
    left = []
    for obj in reversed(objs):
        try:
            client.delete(resource_of(obj["apiVersion"], obj["kind"]), namespace, obj["metadata"]["name"])
        except KubeError as exc:
            log.warning("could not delete %s %s: %s", obj["kind"], obj["metadata"]["name"], exc)
            left.append(obj)
    return left
