"""Serializers of the cluster registry. `kubeconfig` is write-only: no response ever carries it."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer
from apps.projects.models import Project
from apps.runtime import services
from apps.runtime.models import Cluster, Operator, ProjectCluster


class InventorySummarySerializer(StrictSerializer):
    """The controller's last reading, summed (the nodes themselves are in `inventory`)."""

    nodes = serializers.IntegerField(source="total.nodes")
    nodes_ready = serializers.IntegerField(source="total.ready")
    cpu = serializers.FloatField(source="total.cpu.allocatable")
    cpu_free = serializers.FloatField(source="total.cpu.free")
    memory_bytes = serializers.FloatField(source="total.memory.allocatable")
    memory_free_bytes = serializers.FloatField(source="total.memory.free")
    gpus = serializers.FloatField(source="total.gpu.allocatable")
    gpus_free = serializers.FloatField(source="total.gpu.free")
    refreshed_at = serializers.DateTimeField()
    error = serializers.CharField()


class ClusterSerializer(StrictModelSerializer):
    """A cluster. Writes go through `services.save_cluster`, which checks the kubeconfig and its context."""

    kubeconfig = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        style={"base_template": "textarea.html"},
        help_text=_("kubeconfig YAML, stored encrypted and never returned; omitted or empty keeps the stored one."),
    )
    has_kubeconfig = serializers.SerializerMethodField()
    operators = serializers.ListField(child=serializers.ChoiceField(choices=Operator.choices), required=False)
    summary = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = [
            "name", "description", "enabled", "in_cluster", "kubeconfig", "has_kubeconfig", "context", "version",
            "default_namespace", "operators", "node_selector", "resource_group_label", "gpu_resource",
            "gpu_type_label", "vgpu_resources", "rdma_resource", "volcano_queue", "priority_classes", "placement",
            "pack_scheduler_name", "work_volume_claim", "summary",
            "inventory", "inventory_at", "created_at",
        ]  # fmt: skip
        read_only_fields = ["inventory", "inventory_at", "created_at"]
        # Uniqueness and the rest are the service's (one message for pages, API and admin).
        extra_kwargs = {"name": {"validators": []}}

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list | tuple):
            fields["name"].read_only = True  # workloads and manifests refer to a cluster by name
        return fields

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data = super().to_representation(instance)
        inventory = data.get("inventory")
        if isinstance(inventory, dict) and isinstance(inventory.get("nodes"), list):
            # A node's holders are the queue's (its node-level reservations) and name every project's task runs;
            # who holds what is the capacity endpoint's, which lists only the holders the requester may see.
            nodes = [
                {k: v for k, v in n.items() if k != "holders"} if isinstance(n, dict) else n for n in inventory["nodes"]
            ]
            data["inventory"] = {**inventory, "nodes": nodes}
        return data

    def get_has_kubeconfig(self, cluster: Cluster) -> bool:
        return bool(cluster.kubeconfig)

    @extend_schema_field(InventorySummarySerializer)
    def get_summary(self, cluster: Cluster) -> dict[str, Any]:
        return InventorySummarySerializer(services.summarize_inventory(cluster)).data


class ProjectClusterSerializer(StrictModelSerializer):
    """A project's permission to run on a cluster, in a namespace."""

    # Only staff write bindings, and they may bind any project: the field looks among all of them.
    project = serializers.SlugRelatedField(slug_field="slug", queryset=Project.objects.all())
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    effective_namespace = serializers.CharField(read_only=True)

    class Meta:
        model = ProjectCluster
        fields = ["id", "project", "cluster", "namespace", "effective_namespace", "is_default"]
        validators: list[Any] = []  # bind_project updates an existing binding instead of refusing it

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list | tuple):
            fields["project"].read_only = True
            fields["cluster"].read_only = True
        return fields
