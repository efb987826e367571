"""Pages of the cluster registry: the list, a cluster's nodes and usage, staff forms, a project's clusters.

Members see the clusters bound to their projects (read-only); staff see all and change them. A cluster the
user cannot see is 404; one they see but may not change is 403. The kubeconfig is never rendered.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import VIEW
from apps.runtime import services, usage
from apps.runtime.api.filters import ClusterFilterSet
from apps.runtime.forms import BindingForm, ClusterForm
from apps.runtime.models import Cluster, KubeWorkload, ProjectCluster
from portal.lib.forms import add_service_errors


def get_cluster_for(request: HttpRequest, name: str, *, change: bool = False) -> Cluster:
    """The cluster if the user may see it (else 404) and, with `change`, is staff (else 403)."""
    cluster = get_object_or_404(services.visible_clusters(request.user), name=name)
    if change:
        require_platform_admin(request)
    return cluster


def require_platform_admin(request: HttpRequest) -> None:
    if not services.is_platform_admin(request.user):
        raise PermissionDenied(_("Only platform administrators change clusters."))


@login_required
@require_http_methods(["GET"])
def cluster_list(request: HttpRequest) -> HttpResponse:
    clusters = services.visible_clusters(request.user).annotate(binding_count=Count("bindings")).order_by("name")
    filterset = ClusterFilterSet(request.GET, queryset=clusters)
    rows = [(cluster, services.summarize_inventory(cluster)) for cluster in filterset.qs]
    context = {"rows": rows, "filter": filterset, "is_admin": services.is_platform_admin(request.user)}
    return render(request, "runtime/cluster_list.html", context)


def _detail_context(request: HttpRequest, cluster: Cluster, binding_form: BindingForm | None = None) -> dict:
    is_admin = services.is_platform_admin(request.user)
    context = {
        "cluster": cluster,
        "summary": services.summarize_inventory(cluster),
        "bindings": services.visible_bindings(request.user).filter(cluster=cluster).order_by("project__name"),
        "is_admin": is_admin,
    }
    if is_admin:
        context["binding_form"] = binding_form or BindingForm()
        active = (KubeWorkload.State.PENDING, KubeWorkload.State.RUNNING)
        context["active_workloads"] = cluster.workloads.filter(state__in=active).count()
    return context


@login_required
@require_http_methods(["GET"])
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_cluster_for(request, name)
    return render(request, "runtime/cluster_detail.html", _detail_context(request, cluster))


def _cluster_form_page(request: HttpRequest, cluster: Cluster | None) -> HttpResponse:
    form = ClusterForm(request.POST or None, instance=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.save_cluster(form.instance, kubeconfig=form.cleaned_data["kubeconfig"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Cluster “%(name)s” saved.") % {"name": saved.name})
            return redirect("runtime:cluster-detail", name=saved.name)
    context = {"form": form, "cluster": cluster}
    return render(request, "runtime/cluster_form.html", context, status=400 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def cluster_create(request: HttpRequest) -> HttpResponse:
    require_platform_admin(request)
    return _cluster_form_page(request, None)


@login_required
@require_http_methods(["GET", "POST"])
def cluster_edit(request: HttpRequest, name: str) -> HttpResponse:
    return _cluster_form_page(request, get_cluster_for(request, name, change=True))


@login_required
@require_http_methods(["POST"])
def cluster_delete(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_cluster_for(request, name, change=True)
    try:
        services.delete_cluster(cluster)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("runtime:cluster-detail", name=cluster.name)
    messages.success(request, _("Cluster “%(name)s” deleted.") % {"name": cluster.name})
    return redirect("runtime:cluster-list")


@login_required
@require_http_methods(["POST"])
def binding_save(request: HttpRequest, name: str) -> HttpResponse:
    """Bind a project to the cluster, or change an existing binding's namespace and default."""
    cluster = get_cluster_for(request, name, change=True)
    form = BindingForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.bind_project(data["project"], cluster, namespace=data["namespace"], is_default=data["is_default"])
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            message = _("Project “%(project)s” may run on “%(cluster)s”.")
            messages.success(request, message % {"project": data["project"].name, "cluster": cluster.name})
            return redirect("runtime:cluster-detail", name=cluster.name)
    return render(request, "runtime/cluster_detail.html", _detail_context(request, cluster, form), status=400)


@login_required
@require_http_methods(["POST"])
def binding_delete(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    cluster = get_cluster_for(request, name, change=True)
    binding = get_object_or_404(ProjectCluster.objects.select_related("project"), cluster=cluster, pk=pk)
    services.unbind_project(binding)
    message = _("Project “%(project)s” no longer runs on “%(cluster)s”.")
    messages.success(request, message % {"project": binding.project.name, "cluster": cluster.name})
    return redirect("runtime:cluster-detail", name=cluster.name)


@project_view(VIEW, methods=("GET",))
def project_clusters(request: HttpRequest, project: Project) -> HttpResponse:
    """The clusters a project runs on: a section of the project's overview (htmx), or a page of its own."""
    bindings = [(b, services.summarize_inventory(b.cluster)) for b in services.project_bindings(project)]
    context = {"project": project, "bindings": bindings, "is_admin": services.is_platform_admin(request.user)}
    template = "runtime/partials/project_clusters.html" if request.htmx else "runtime/project_clusters.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET"])
def capacity(request: HttpRequest) -> HttpResponse:
    """This machine's agents and the visible clusters: CPU, memory and GPUs, and who holds them. Platform admins see
    every project's holders; others see their own projects' and the rest as one "other projects" total."""
    return render(request, "runtime/capacity.html", {"capacity": usage.capacity(request.user)})
