"""Dry run: the Kubernetes objects a pipeline's run would create, for review or GitOps, without creating
anything (no run, no token, no output folder). The UI's "Manifests" view and `manage.py pipeline_manifests`
print them as one multi-document YAML."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext

from apps.datasets.services import materialize_root
from apps.jobs.dispatcher import _task_env, build_workload, registry_images
from apps.jobs.models import JobTemplate, Pipeline, PipelineRun, TaskRun
from apps.jobs.references import dataset_arg_names
from apps.runtime.base import cluster_site_url
from apps.runtime.models import Cluster, ProjectCluster
from apps.runtime.placement import Pool
from apps.runtime.workload import Workload

# Where a run's values are not known before it starts, the manifests say so instead of inventing them.
RUN_PLACEHOLDER = 0


@dataclass
class DryRun:
    """The objects of each node (in the pipeline's order) and the nodes that cannot run on the cluster."""

    cluster: str
    namespace: str
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what the pods would lack (e.g. the portal's URL)

    def yaml(self) -> str:
        """One multi-document YAML: a comment names each node; nodes that fail say why in a comment."""
        parts = [f"# pipeline dry run on cluster {self.cluster}, namespace {self.namespace}\n"]
        parts += [f"# warning: {warning}\n" for warning in self.warnings]
        for node, objects in self.objects.items():
            for obj in objects:
                body = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True)
                parts.append(f"---\n# node: {node}\n{body}")
        for node, error in self.errors.items():
            parts.append(f"---\n# node: {node} cannot run on this cluster: {error}\n")
        return "".join(parts)


def cluster_choices(project) -> list[tuple[Any, str]]:
    """(Cluster, namespace) the project may run on, the default binding first; every enabled cluster (in its
    default namespace) when none is bound, so an admin can preview before binding."""
    bound = [
        (b.cluster, b.effective_namespace)
        for b in ProjectCluster.objects.filter(project=project, cluster__enabled=True).select_related("cluster")
    ]
    return bound or [(c, c.default_namespace) for c in Cluster.objects.filter(enabled=True)]


def choose_cluster(project, name: str = "") -> tuple[Any, str]:
    """The (Cluster, namespace) named `name` among the project's choices (the first when empty). LookupError
    names the choices when there is no such cluster, or none at all."""
    choices = cluster_choices(project)
    if not choices:
        raise LookupError(
            gettext("no Kubernetes cluster is registered; an administrator adds one on the Clusters page")
        )
    if not name:
        return choices[0]
    for cluster, namespace in choices:
        if cluster.name == name:
            return cluster, namespace
    raise LookupError(
        gettext("no cluster “%(name)s” for this project; choose one of: %(choices)s")
        % {"name": name, "choices": ", ".join(c.name for c, _ns in choices)}
    )


def pipeline_workloads(pipeline: Pipeline, pool: Pool) -> list[tuple[str, Workload]]:
    """(node, workload) of every node that would run (skipped nodes excluded), as the dispatcher would build
    them for attempt 1 of a new run, with placeholders where only the run knows the value."""
    from apps.jobs.services import _freeze

    project = pipeline.project
    spec = _freeze(project, pipeline.spec)
    templates = JobTemplate.objects.in_bulk([node["template_id"] for node in spec["nodes"]])
    images = registry_images({project.pk}, {t.image for t in templates.values()})
    run = PipelineRun(
        pk=RUN_PLACEHOLDER,
        project=project,
        pipeline=pipeline,
        pipeline_name=pipeline.name,
        number=RUN_PLACEHOLDER,
        spec=spec,
        priority=int(spec.get("priority") or 0),  # as start_spec_run gives it: its pods' priority class
        created_by=project.created_by,
        created_at=timezone.now(),
    )
    result = []
    for node in spec["nodes"]:
        if node.get("skip"):
            continue
        template = templates[node["template_id"]]
        task = TaskRun(pk=RUN_PLACEHOLDER, run=run, node=node["name"], attempt=1)
        out = Path(f"<work>/{project.slug}/run-N/{node['name']}/attempt-1")
        outputs = {(run.pk, dep): f"<work>/{project.slug}/run-N/{dep}/attempt-1" for dep in node.get("depends_on", [])}
        args = dict(node.get("args", {}))
        for arg in dataset_arg_names(template):
            pinned = (node.get("datasets") or {}).get(arg)
            if pinned:
                args[arg] = str(materialize_root() / pinned["digest"])
        image = images.get((template.project_id, template.image)) or images.get((None, template.image))
        workload = build_workload(
            task,
            node,
            template,
            # A project secret stays a reference: the manifests show the secretKeyRef the pods will have, never a value.
            env=_task_env(task, node, template, out, outputs, issue_token=False, pool=pool),
            args=args,
            out=out,
            pool=pool,
            image=image,
        )
        workload.uid = f"dry-{project.slug}-{pipeline.name}-{node['name']}"
        workload.labels["task_run"] = workload.labels["run"] = "dry-run"
        result.append((node["name"], workload))
    return result


def dry_run(pipeline: Pipeline, cluster=None, namespace: str = "") -> DryRun:
    """Build and validate every node's objects for `cluster` (a Cluster; the project's default when None)."""
    from apps.runtime.kubernetes import manifests
    from apps.runtime.kubernetes.profile import ClusterProfile
    from apps.runtime.kubernetes.validation import validate_all

    if cluster is None:
        cluster, namespace = choose_cluster(pipeline.project)
    namespace = namespace or cluster.default_namespace
    profile = ClusterProfile.of(cluster, namespace)
    result = DryRun(cluster=cluster.name, namespace=namespace)
    if not cluster_site_url():
        result.warnings.append(
            gettext(
                "PORTAL_CLUSTER_URL is not set and SITE_URL (%(site)s) is a loopback address: the pods get no "
                "PORTAL_API_URL or MLFLOW_TRACKING_URI, so tasks cannot reach the portal's API or record to its "
                "tracking. Set PORTAL_CLUSTER_URL to the URL pods reach the portal at."
            )
            % {"site": settings.SITE_URL}
        )
    for node, workload in pipeline_workloads(pipeline, Pool("kubernetes", cluster.name, namespace)):
        try:
            objects = manifests.build(workload, profile)
            validate_all(objects, profile.version)
        except ValueError as exc:  # ManifestError, ManifestInvalid
            result.errors[node] = str(exc)
            continue
        result.objects[node] = objects
    return result
