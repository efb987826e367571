"""Knowledge base pages: the project's bases (own and shared with it), a base's documents with their live status,
upload and sharing, a document's passages (what citations link to), and the retrieval debug view with scores.

Bases shared with the project are readable here; every write needs the owning project (403 otherwise)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.knowledge import chat, services
from apps.knowledge.forms import KnowledgeBaseForm, QueryForm, ShareForm, UploadForm
from apps.knowledge.models import Document, KnowledgeBase
from apps.knowledge.streaming import sse_error, sse_response
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW, has_project_perm
from portal.lib.forms import add_service_errors

READ_ONLY = _("This knowledge base is shared with your project read-only.")


def _owned(kb: KnowledgeBase, project: Project) -> None:
    if not kb.is_owned_by(project):
        raise PermissionDenied(READ_ONLY)


@project_view(VIEW, methods=("GET",))
def kb_list(request: HttpRequest, project: Project) -> HttpResponse:
    bases = (
        KnowledgeBase.objects.filter(Q(project=project) | Q(shares__project=project))
        .distinct()
        .select_related("project")
        .order_by("name")
    )
    context = {"project": project, "bases": bases, "can_create": has_project_perm(request.user, project, CONTRIBUTE)}
    return render(request, "knowledge/kb_list.html", context)


@project_view(CONTRIBUTE)
def kb_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = KnowledgeBaseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            kb = services.create_knowledge_base(project, request.user, **form.cleaned_data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Knowledge base “%(name)s” created.") % {"name": kb.name})
            return redirect("knowledge:kb-detail", project=project.slug, pk=kb.pk)
    status = 400 if form.errors else 200
    return render(request, "knowledge/kb_form.html", {"project": project, "form": form}, status=status)


def _detail_context(request: HttpRequest, project: Project, kb: KnowledgeBase) -> dict:
    owned = kb.is_owned_by(project)
    return {
        "project": project,
        "kb": kb,
        "owned": owned,
        "can_upload": owned and has_project_perm(request.user, project, CONTRIBUTE),
        "can_share": owned and has_project_perm(request.user, project, CHANGE),
        "documents": kb.documents.defer("content").order_by("name"),
        "shares": kb.shares.select_related("project") if owned else [],
    }


@project_view(VIEW, model=KnowledgeBase, methods=("GET",))
def kb_detail(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    context = {**_detail_context(request, project, kb), "upload_form": UploadForm(), "share_form": ShareForm()}
    if request.htmx:
        return render(request, "knowledge/partials/documents.html", context)
    return render(request, "knowledge/kb_detail.html", context)


@project_view(CONTRIBUTE, model=KnowledgeBase, methods=("POST",))
def kb_upload(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    _owned(kb, project)
    form = UploadForm(request.POST, request.FILES)
    if form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            doc, changed = services.add_document(
                kb, request.user, upload.name, upload.read(), form.cleaned_data["tags"]
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            if changed:
                messages.success(
                    request, _("“%(name)s” (version %(v)d) is being ingested.") % {"name": doc.name, "v": doc.version}
                )
            else:
                messages.info(request, _("“%(name)s” has not changed.") % {"name": doc.name})
            return redirect("knowledge:kb-detail", project=project.slug, pk=kb.pk)
    context = {**_detail_context(request, project, kb), "upload_form": form, "share_form": ShareForm()}
    return render(request, "knowledge/kb_detail.html", context, status=400)


@project_view(CHANGE, model=KnowledgeBase, methods=("POST",))
def kb_share(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    _owned(kb, project)
    form = ShareForm(request.POST)
    if form.is_valid():
        slug = form.cleaned_data["project"]
        try:
            if request.POST.get("unshare"):
                services.unshare_knowledge_base(kb, slug)
            else:
                services.share_knowledge_base(kb, slug, request.user)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            return redirect("knowledge:kb-detail", project=project.slug, pk=kb.pk)
    context = {**_detail_context(request, project, kb), "upload_form": UploadForm(), "share_form": form}
    return render(request, "knowledge/kb_detail.html", context, status=400)


@project_view(CONTRIBUTE, model=KnowledgeBase, methods=("POST",))
def kb_delete(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    _owned(kb, project)
    services.delete_knowledge_base(kb)
    messages.success(request, _("Knowledge base “%(name)s” deleted.") % {"name": kb.name})
    return redirect("knowledge:kb-list", project=project.slug)


@project_view(VIEW, model=KnowledgeBase, methods=("GET",))
def kb_search(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    """The retrieval debug view: each passage with its BM25 and dense scores and ranks and the fused score."""
    form = QueryForm(request.GET or None)
    result = None
    if form.is_bound and form.is_valid():
        tags = [t for t in form.cleaned_data["tags"].replace(",", " ").split() if t]
        try:
            result = services.query(
                kb, form.cleaned_data["q"], k=10, tags=tags or None, mode=form.cleaned_data["mode"] or "hybrid"
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
    context = {"project": project, "kb": kb, "form": form, "result": result}
    return render(request, "knowledge/kb_search.html", context, status=400 if form.errors else 200)


@project_view(VIEW, model=Document, methods=("GET",))
def document_detail(request: HttpRequest, project: Project, doc: Document) -> HttpResponse:
    """A document's passages in order, each anchored (`#chunk-<id>`) for citations."""
    context = {
        "project": project,
        "kb": doc.knowledge_base,
        "doc": doc,
        "chunks": doc.chunks.order_by("ordinal"),
        "can_delete": doc.knowledge_base.is_owned_by(project) and has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "knowledge/document_detail.html", context)


@project_view(CONTRIBUTE, model=Document, methods=("POST",))
def document_delete(request: HttpRequest, project: Project, doc: Document) -> HttpResponse:
    kb = doc.knowledge_base
    _owned(kb, project)
    services.delete_document(doc)
    messages.success(request, _("“%(name)s” and its passages deleted.") % {"name": doc.name})
    return redirect("knowledge:kb-detail", project=project.slug, pk=kb.pk)


@project_view(CONTRIBUTE, model=Document, methods=("POST",))
def document_reingest(request: HttpRequest, project: Project, doc: Document) -> HttpResponse:
    _owned(doc.knowledge_base, project)
    try:
        services.reingest_document(doc)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("knowledge:kb-detail", project=project.slug, pk=doc.knowledge_base_id)


@project_view(VIEW, model=KnowledgeBase, methods=("GET",))
def kb_chat(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    """The chat page: the answer streams in token by token, citing passages [1], [2] linked to their documents."""
    try:
        chat.endpoint_for(kb)
        missing = ""
    except ValidationError as exc:
        missing = " ".join(exc.messages)
    starting = chat.not_ready(kb)
    context = {"project": project, "kb": kb, "missing": missing, "starting": starting}
    return render(request, "knowledge/kb_chat.html", context)


@project_view(VIEW, model=KnowledgeBase, methods=("GET",))
def kb_chat_stream(request: HttpRequest, project: Project, kb: KnowledgeBase) -> HttpResponse:
    """Server-sent events for the chat page: `passages` (the numbered citations), `token`s, then `done` or `error`
    (a refused question is an `error` event too: an EventSource cannot read the body of an error status)."""
    question = request.GET.get("q", "")
    try:
        answer = chat.answer(kb, question)
    except ValidationError as exc:
        return sse_error(" ".join(exc.messages))
    citations = [
        {
            "number": p.number,
            "document": p.chunk.document.name,
            "heading": p.chunk.heading,
            "page": p.chunk.page,
            "url": reverse("knowledge:document-detail", kwargs={"project": project.slug, "pk": p.chunk.document_id})
            + f"#chunk-{p.chunk.pk}",
        }
        for p in answer.result.passages
    ]
    return sse_response(answer, citations)
