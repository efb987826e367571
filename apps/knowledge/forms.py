"""Forms of the knowledge base pages. Values are checked by the services (one set of messages for pages and API)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from portal.lib.forms import StyledFormMixin


class KnowledgeBaseForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label=_("Name"), max_length=50, help_text=_("Lowercase letters, digits and hyphens."))
    description = forms.CharField(label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 2}))
    llm_service = forms.CharField(
        label=_("Chat service"),
        required=False,
        max_length=50,
        help_text=_("The name of one of the project's llm inference services; it answers before an endpoint below."),
    )
    llm_url = forms.URLField(
        label=_("LLM endpoint"),
        required=False,
        assume_scheme="https",
        help_text=_("An OpenAI-compatible base URL (…/v1) for answers; empty: retrieval only."),
    )
    llm_model = forms.CharField(label=_("LLM model"), required=False, max_length=200)
    llm_key_secret = forms.CharField(
        label=_("API key secret"), required=False, max_length=100, help_text=_("The name of a project secret.")
    )


class UploadForm(StyledFormMixin, forms.Form):
    file = forms.FileField(label=_("File"), help_text=_("Markdown, text, HTML, PDF (text layer) or CSV."))
    tags = forms.CharField(label=_("Tags"), required=False, max_length=500, help_text=_("Separated by commas."))


class ShareForm(StyledFormMixin, forms.Form):
    project = forms.CharField(label=_("Project slug"), max_length=50)


class QueryForm(StyledFormMixin, forms.Form):
    q = forms.CharField(label=_("Question"), max_length=2000)
    mode = forms.ChoiceField(
        label=_("Retrieval"),
        choices=[("hybrid", _("Hybrid (RRF)")), ("lexical", _("BM25 only")), ("dense", _("Dense only"))],
        initial="hybrid",
        required=False,
    )
    tags = forms.CharField(label=_("Tags"), required=False, max_length=500)
