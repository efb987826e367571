"""`manage.py pipeline_manifests PROJECT/PIPELINE [--cluster NAME]`: print the multi-document YAML the
kubernetes runtime would apply for a run of the pipeline (a dry run: nothing is created)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.jobs.dryrun import dry_run
from apps.jobs.models import Pipeline
from apps.runtime.models import Cluster, ProjectCluster


class Command(BaseCommand):
    help = "Print the Kubernetes objects a run of PROJECT/PIPELINE would create (nothing is applied)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pipeline", help="project-slug/pipeline-name")
        parser.add_argument("--cluster", help="a registered cluster (default: the project's default binding)")
        parser.add_argument("--namespace", default="", help="default: the project's namespace on that cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        project_slug, sep, name = options["pipeline"].partition("/")
        if not sep or not project_slug or not name:
            raise CommandError("name the pipeline as project-slug/pipeline-name")
        pipeline = Pipeline.objects.select_related("project").filter(project__slug=project_slug, name=name).first()
        if pipeline is None:
            raise CommandError(f"no pipeline {name!r} in project {project_slug!r}")
        cluster, namespace = None, options["namespace"]
        if options["cluster"]:
            cluster = Cluster.objects.filter(name=options["cluster"]).first()
            if cluster is None:
                known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no cluster {options['cluster']!r} (registered: {known})")
            binding = ProjectCluster.objects.filter(project=pipeline.project, cluster=cluster).first()
            namespace = namespace or (binding.effective_namespace if binding else "")
        try:
            result = dry_run(pipeline, cluster, namespace)
        except ValidationError as exc:  # the pipeline no longer validates (e.g. a template was deleted)
            raise CommandError(f"the pipeline does not validate: {'; '.join(exc.messages)}") from None
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(result.yaml(), ending="")
        for warning in result.warnings:
            self.stderr.write(f"warning: {warning}")
        if result.errors:
            for node, error in result.errors.items():
                self.stderr.write(f"{node}: {error}")
            raise CommandError(f"{len(result.errors)} node(s) cannot run on cluster {result.cluster}")
