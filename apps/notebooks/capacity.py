"""Whether a notebook may start now, and where: the project's quota (its running notebooks and tasks count) and
the room its runtime has (the local agent's capacity, or a bound cluster's inventory, which must also have the work
volume claim that keeps a notebook's files). Each refusal is a ValidationError saying why."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.notebooks.launch import Placement
from apps.notebooks.models import Notebook
from apps.projects.usage import in_use, limits_of
from apps.runtime.placement import Pools


def check_quota_in_use(notebook: Notebook) -> None:
    """The project's running notebooks, model servers and tasks plus this one must fit its quota."""
    limits = limits_of(notebook.project)
    if all(limit is None for limit in limits):
        return
    used = in_use(notebook.project, except_notebook=notebook.pk)
    need = (float(notebook.cpu), float(notebook.memory_bytes), float(notebook.gpu))
    labels = (_("CPU cores"), _("GiB of memory"), _("GPUs"))
    scale = (1, 2**30, 1)
    for i in range(3):
        if limits[i] is not None and need[i] and used[i] + need[i] > float(limits[i]) + 1e-9:
            raise ValidationError(
                _("Not enough quota: %(used)g of %(limit)g %(what)s in use, this notebook needs %(need)g.")
                % {
                    "used": round(used[i] / scale[i], 2),
                    "limit": round(float(limits[i]) / scale[i], 2),
                    "what": labels[i],
                    "need": round(need[i] / scale[i], 2),
                }
            )


def place(notebook: Notebook) -> Placement:
    """The first pool of the project with room for the notebook now; ValidationError saying why there is none."""
    from apps.runtime.models import Cluster

    pools = Pools()
    candidates = pools.of(notebook.project)
    if not candidates:
        raise ValidationError(_("The project runs on Kubernetes and no enabled cluster is bound to it."))
    need = (float(notebook.cpu), float(notebook.memory_bytes), float(notebook.gpu))
    reasons = []
    for pool in candidates:
        if pool.cluster:
            claim = Cluster.objects.filter(name=pool.cluster).values_list("work_volume_claim", flat=True).first()
            if not claim:
                reasons.append(
                    _("cluster %(c)s has no work volume claim, so a notebook's files would not survive a stop")
                    % {"c": pool.cluster}
                )
                continue
        free, capacity = pools.free(pool)
        if capacity is None or free is None:
            reasons.append(
                _("cluster %(c)s is not reachable (is `manage.py runkube` running?)") % {"c": pool.cluster}
                if pool.cluster
                else _("no agent is running on this machine (start it with `manage.py runagent`)")
            )
            continue
        short = [label for value, got, label in zip(need, free, ("CPU", "memory", "GPU"), strict=True) if value > got]
        if short:
            reasons.append(_("not enough free %(what)s on %(where)s") % {"what": ", ".join(short), "where": pool.label})
            continue
        return Placement(pool.runtime, pool.cluster, pool.namespace)
    raise ValidationError(_("The notebook cannot start now: %(why)s.") % {"why": "; ".join(reasons)})
