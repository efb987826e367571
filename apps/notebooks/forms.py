"""Forms of the notebook pages. Values are checked by the services (one set of messages for pages and API)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from apps.notebooks.models import Notebook
from apps.runtime.workload import format_memory
from portal.lib.forms import StyledFormMixin


class NotebookSettingsForm(StyledFormMixin, forms.Form):
    image = forms.CharField(
        label=_("Image"),
        max_length=200,
        required=False,
        help_text=_("On Kubernetes: a container image with JupyterLab. Empty: the portal's notebook image."),
    )
    cpu = forms.CharField(label=_("CPU cores"), initial="1", max_length=20)
    memory = forms.CharField(label=_("Memory"), initial="2Gi", max_length=20, help_text=_("e.g. 512Mi, 4Gi"))
    gpu = forms.CharField(label=_("GPUs"), initial="0", max_length=20)
    idle_timeout = forms.IntegerField(
        label=_("Idle timeout (minutes)"),
        required=False,
        min_value=1,
        help_text=_(
            "Stopped after this long without kernel or terminal activity (files are kept). Empty: the "
            "project's default."
        ),
    )

    @classmethod
    def for_notebook(cls, notebook: Notebook, data=None) -> NotebookSettingsForm:
        initial = {
            "image": notebook.image,
            "cpu": f"{notebook.cpu:g}",
            "memory": format_memory(notebook.memory_bytes),
            "gpu": f"{notebook.gpu:g}",
            "idle_timeout": notebook.idle_timeout,
        }
        return cls(data, initial=initial)


class NotebookForm(NotebookSettingsForm):
    name = forms.CharField(
        label=_("Name"), max_length=50, help_text=_("Lowercase letters, digits and hyphens, e.g. eda-churn.")
    )
    ide = forms.ChoiceField(label=_("IDE"), choices=Notebook.Ide.choices, initial=Notebook.Ide.JUPYTERLAB)

    field_order = ["name", "ide", "image", "cpu", "memory", "gpu", "idle_timeout"]
