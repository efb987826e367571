"""Whether a notebook may start now, and where: `admit` (apps/runtime/admission.py) with what the project's running
notebooks, model servers and tasks hold; a cluster must also have the work volume claim that keeps a notebook's
files. Each refusal is a ValidationError saying why."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.notebooks.launch import Placement
from apps.notebooks.models import Notebook
from apps.projects.usage import in_use
from apps.runtime.admission import Refusal, admit
from apps.runtime.models import Cluster
from apps.runtime.placement import Pool, Pools


def place(notebook: Notebook) -> Placement:
    """The first pool of the project with room for the notebook now, within the project's quota; ValidationError
    saying why there is none."""
    project = notebook.project
    quota = getattr(project, "quota", None)
    used = in_use(project, except_=("notebook", notebook.pk)) if quota is not None and quota.limits_anything else None
    admission = admit(project, notebook.resources, in_use=used, pools=Pools(), usable=_keeps_files)
    if admission.shortfall is not None:
        raise ValidationError(
            _("Not enough quota: this notebook needs %(shortfall)s.") % {"shortfall": admission.shortfall}
        )
    if admission.pool is None:
        reasons = "; ".join(str(refusal) for refusal in admission.refusals)
        raise ValidationError(_("The notebook cannot start now: %(why)s.") % {"why": reasons})
    pool = admission.pool
    return Placement(pool.runtime, pool.cluster, pool.namespace)


def _keeps_files(pool: Pool) -> Refusal | None:
    if pool.cluster and not Cluster.objects.filter(name=pool.cluster).exclude(work_volume_claim="").exists():
        why = _("it has no work volume claim, so a notebook's files would not survive a stop")
        sentence = _("cluster %(name)s has no work volume claim, so a notebook's files would not survive a stop")
        return Refusal(_("cluster %(name)s") % {"name": pool.cluster}, why, sentence % {"name": pool.cluster})
    return None
