"""Knowledge base workflows: create, share, add documents (uploads or a dataset version's files), ingest them
(extract → chunk → embed → replace the chunks), delete, and query."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Max
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.knowledge import chunking, retrieval
from apps.knowledge.extract import ExtractError, extract, kind_for
from apps.knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseShare
from apps.projects.events import publish_event
from apps.projects.models import Project
from apps.serving.models import Framework, InferenceService
from portal.lib.outbound import private_address, refusal

logger = logging.getLogger(__name__)

EMBED_BATCH = 256
MAX_TAGS = 20
_TAG = re.compile(r"^[\w.-]{1,50}$")


# --- Knowledge bases ---------------------------------------------------------------------------------------------


def _llm_service(project: Project, value: Any) -> Any:
    """The project's `llm` inference service named by `value` (a name or the service itself; "" or None: none)."""
    if value in (None, ""):
        return None
    name = value.name if isinstance(value, InferenceService) else str(value).strip()
    service = InferenceService.objects.filter(project=project, name=name).first()
    if service is None:
        raise ValidationError({"llm_service": [_("The project has no inference service of this name.")]})
    if service.framework != Framework.LLM:
        raise ValidationError({"llm_service": [_("This service does not serve a chat model (framework llm).")]})
    return service


def _check_llm(project: Project, fields: dict[str, Any]) -> None:
    url, model, secret = fields.get("llm_url", ""), fields.get("llm_model", ""), fields.get("llm_key_secret", "")
    if url and (found := private_address(url, resolve=False)):
        raise ValidationError({"llm_url": [refusal(found)]})
    if url and not model:
        raise ValidationError({"llm_model": [_("Name the model the endpoint serves.")]})
    if secret and not project.secrets.filter(name=secret).exists():
        raise ValidationError({"llm_key_secret": [_("The project has no secret of this name.")]})


def create_knowledge_base(project: Project, user: Any, name: str, **fields: Any) -> KnowledgeBase:
    """A new base; `llm_service` may name one of the project's `llm` inference services (it answers the chat)."""
    if "llm_service" in fields:
        fields["llm_service"] = _llm_service(project, fields["llm_service"])
    kb = KnowledgeBase(project=project, name=name, created_by=user, **fields)
    kb.full_clean(exclude=["project", "created_by", "llm_service"], validate_unique=False)
    _check_llm(project, fields)
    if KnowledgeBase.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": [_("The project already has a knowledge base of this name.")]})
    try:
        with transaction.atomic():
            kb.save()
    except IntegrityError:
        raise ValidationError({"name": [_("The project already has a knowledge base of this name.")]}) from None
    return kb


def update_knowledge_base(kb: KnowledgeBase, **fields: Any) -> KnowledgeBase:
    if "llm_service" in fields:
        fields["llm_service"] = _llm_service(kb.project, fields["llm_service"])
    for key, value in fields.items():
        setattr(kb, key, value)
    kb.full_clean(exclude=["project", "created_by", "llm_service"], validate_unique=False)
    _check_llm(kb.project, {f: getattr(kb, f) for f in ("llm_url", "llm_model", "llm_key_secret")})
    if KnowledgeBase.objects.filter(project=kb.project, name=kb.name).exclude(pk=kb.pk).exists():
        raise ValidationError({"name": [_("The project already has a knowledge base of this name.")]})
    kb.save()
    return kb


def delete_knowledge_base(kb: KnowledgeBase) -> None:
    kb.delete()
    forget_index(kb.pk)


def share_knowledge_base(kb: KnowledgeBase, project_slug: str, user: Any) -> KnowledgeBaseShare:
    """Let the members of the project `project_slug` read `kb` (never change it)."""
    target = Project.objects.filter(slug=project_slug).first()
    if target is None:
        raise ValidationError({"project": [_("No project has this slug.")]})
    if target.pk == kb.project_id:
        raise ValidationError({"project": [_("The knowledge base belongs to this project already.")]})
    share, _created = KnowledgeBaseShare.objects.get_or_create(
        knowledge_base=kb, project=target, defaults={"granted_by": user}
    )
    return share


def unshare_knowledge_base(kb: KnowledgeBase, project_slug: str) -> None:
    deleted, _rows = KnowledgeBaseShare.objects.filter(knowledge_base=kb, project__slug=project_slug).delete()
    if not deleted:
        raise ValidationError({"project": [_("The knowledge base is not shared with this project.")]})


# --- Documents ---------------------------------------------------------------------------------------------------


def clean_tags(tags: Any) -> list[str]:
    if isinstance(tags, str):
        tags = [t for t in re.split(r"[,\s]+", tags) if t]
    if (
        not isinstance(tags, list)
        or len(tags) > MAX_TAGS
        or not all(isinstance(t, str) and _TAG.match(t) for t in tags)
    ):
        raise ValidationError(
            {"tags": [_("Give up to %(n)d tags of letters, digits, dots, dashes and underscores.") % {"n": MAX_TAGS}]}
        )
    return sorted(set(tags))


def add_document(
    kb: KnowledgeBase, user: Any, name: str, data: bytes, tags: Any = (), kind: str = "", source: str = ""
) -> tuple[Document, bool]:
    """Store `data` as document `name` and queue its ingestion; (document, whether it changed).

    The same content under the same name is no new version (nothing is re-ingested); other content replaces the
    document's chunks once ingested.
    """
    name = name.strip().replace("\\", "/").lstrip("/")
    if not name or len(name) > 255 or "\x00" in name:
        raise ValidationError({"name": [_("Give the document a name of 1–255 characters.")]})
    kind = kind or kind_for(name) or ""
    if kind not in Document.Kind.values:
        allowed = ", ".join(sorted({".md", ".txt", ".html", ".pdf", ".csv"}))
        raise ValidationError({"file": [_("Unsupported file type; use one of %(allowed)s.") % {"allowed": allowed}]})
    limit = settings.PORTAL_KNOWLEDGE_MAX_BYTES
    if len(data) > limit:
        raise ValidationError({"file": [_("The file is larger than %(n)d bytes.") % {"n": limit}]})
    if not data:
        raise ValidationError({"file": [_("The file is empty.")]})
    tags = clean_tags(list(tags) if not isinstance(tags, str) else tags)
    digest = hashlib.sha256(data).hexdigest()
    now = timezone.now()
    with transaction.atomic():
        doc = Document.objects.select_for_update().filter(knowledge_base=kb, name=name).first()
        if doc is not None and doc.digest == digest:
            if doc.tags != tags:
                doc.tags = tags
                doc.updated_at = now
                doc.save(update_fields=["tags", "updated_at"])
            return doc, False
        if doc is None:
            doc = Document(knowledge_base=kb, name=name, created_by=user, version=1)
        else:
            doc.version += 1
        doc.kind, doc.tags, doc.content, doc.size, doc.digest = kind, tags, data, len(data), digest
        doc.source, doc.status, doc.reason, doc.updated_at = source, Document.Status.PENDING, "", now
        doc.save()
        queue_ingest(doc)
    return doc, True


def queue_ingest(doc: Document) -> None:
    from apps.knowledge.tasks import ingest_document
    from apps.outbox.services import enqueue

    enqueue(ingest_document, doc.pk)


def add_dataset_version(kb: KnowledgeBase, user: Any, version: Any, tags: Any = ()) -> list[Document]:
    """Every file of a dataset version whose type a knowledge base reads, as documents named by their path."""
    from apps.datasets import blobs

    files = [f for f in version.files.select_related("blob") if kind_for(f.path)]
    if not files:
        raise ValidationError({"dataset": [_("The version has no Markdown, text, HTML, PDF or CSV file.")]})
    docs = []
    for f in files:
        with blobs.storage().open(f.blob.storage_name, "rb") as fh:
            data = fh.read(settings.PORTAL_KNOWLEDGE_MAX_BYTES + 1)
        doc, _changed = add_document(kb, user, f.path, data, tags=tags, source=version.ref)
        docs.append(doc)
    return docs


def delete_document(doc: Document) -> None:
    kb_id = doc.knowledge_base_id
    doc.delete()
    forget_index(kb_id)


def _publish(doc: Document, **fields: Any) -> None:
    publish_event(doc.knowledge_base.project_id, "document", doc.pk, status=doc.status, **fields)


def ingest_document(pk: int) -> Document | None:
    """Extract, chunk and embed a pending document, then replace its chunks in one transaction.

    Safe to run twice: the row is claimed with a conditional UPDATE, and a version that changed meanwhile is left
    to the ingestion queued for it.
    """
    claimed = Document.objects.filter(pk=pk, status=Document.Status.PENDING).update(
        status=Document.Status.INGESTING, reason=""
    )
    if not claimed:
        return None
    doc = Document.objects.select_related("knowledge_base").get(pk=pk)
    digest = doc.digest
    _publish(doc, progress=0)
    try:
        pieces = chunking.split(extract(doc.kind, bytes(doc.content)))
        vectors = []
        for i in range(0, len(pieces), EMBED_BATCH):
            vectors.append(retrieval.embed([p.text for p in pieces[i : i + EMBED_BATCH]]))
            _publish(doc, progress=round(100 * min(len(pieces), i + EMBED_BATCH) / max(len(pieces), 1)))
        matrix = np.concatenate(vectors) if vectors else np.zeros((0, retrieval.DIM), np.float32)
    except ExtractError as exc:
        return _fail(pk, digest, str(exc))
    except Exception as exc:  # a file that breaks a parser fails alone, with the parser's word for it
        logger.exception("ingesting document %s failed", pk)
        return _fail(pk, digest, _("The file could not be read: %(error)s") % {"error": exc.__class__.__name__})
    with transaction.atomic():
        doc = Document.objects.select_for_update().get(pk=pk)
        if doc.digest != digest or doc.status != Document.Status.INGESTING:
            return doc  # a newer version arrived; its own ingestion replaces the chunks
        Chunk.objects.filter(document=doc).delete()
        Chunk.objects.bulk_create(
            [
                Chunk(
                    knowledge_base_id=doc.knowledge_base_id,
                    document=doc,
                    ordinal=i,
                    text=p.text,
                    start=p.start,
                    end=p.end,
                    page=p.page,
                    heading_path=list(p.heading_path),
                    embedding=matrix[i].tobytes(),
                )
                for i, p in enumerate(pieces)
            ],
            batch_size=1000,
        )
        doc.status, doc.chunk_count, doc.ingested_at = Document.Status.READY, len(pieces), timezone.now()
        doc.save(update_fields=["status", "chunk_count", "ingested_at"])
    forget_index(doc.knowledge_base_id)
    _publish(doc, progress=100)
    return doc


def _fail(pk: int, digest: str, reason: str) -> Document:
    Document.objects.filter(pk=pk, digest=digest, status=Document.Status.INGESTING).update(
        status=Document.Status.FAILED, reason=reason[:2000]
    )
    doc = Document.objects.select_related("knowledge_base").get(pk=pk)
    _publish(doc)
    return doc


def reingest_document(doc: Document) -> Document:
    """Queue a failed or finished document again (e.g. after the chunking settings changed)."""
    if doc.status == Document.Status.INGESTING:
        raise ValidationError({"status": [_("The document is being ingested.")]})
    with transaction.atomic():
        doc.status, doc.reason = Document.Status.PENDING, ""
        doc.save(update_fields=["status", "reason"])
        queue_ingest(doc)
    return doc


# --- Retrieval ---------------------------------------------------------------------------------------------------


@dataclass
class LoadedIndex:
    stamp: tuple
    index: retrieval.Index
    chunk_ids: np.ndarray
    document_ids: np.ndarray


_indexes: dict[int, LoadedIndex] = {}
_indexes_lock = threading.Lock()


def forget_index(kb_id: int) -> None:
    with _indexes_lock:
        _indexes.pop(kb_id, None)


def _stamp(kb: KnowledgeBase) -> tuple:
    """Changes whenever the base's chunks do: ingestion replaces chunks (new ids), deletes lower the count."""
    agg = Chunk.objects.filter(knowledge_base=kb).aggregate(n=Count("pk"), last=Max("pk"))
    return agg["n"], agg["last"]


def load_index(kb: KnowledgeBase) -> LoadedIndex:
    """The base's index, built from its chunk rows once per process and rebuilt when they change."""
    stamp = _stamp(kb)
    with _indexes_lock:
        loaded = _indexes.get(kb.pk)
    if loaded is not None and loaded.stamp == stamp:
        return loaded
    rows = list(
        Chunk.objects.filter(knowledge_base=kb).order_by("pk").values_list("pk", "document_id", "text", "embedding")
    )
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    docs = np.array([r[1] for r in rows], dtype=np.int64)
    vectors = (
        np.frombuffer(b"".join(bytes(r[3]) for r in rows), dtype=np.float32).reshape(len(rows), retrieval.DIM)
        if rows
        else np.zeros((0, retrieval.DIM), np.float32)
    )
    loaded = LoadedIndex(stamp, retrieval.Index([r[2] for r in rows], vectors), ids, docs)
    with _indexes_lock:
        _indexes[kb.pk] = loaded
    return loaded


@dataclass
class Passage:
    number: int
    chunk: Chunk
    hit: retrieval.Hit


@dataclass
class QueryResult:
    query: str
    passages: list[Passage]
    not_found: bool
    best_dense: float
    best_lexical: float


MODES = ("hybrid", "lexical", "dense")


def query(
    kb: KnowledgeBase,
    text: str,
    k: int = 5,
    documents: list[int] | None = None,
    tags: list[str] | None = None,
    mode: str = "hybrid",
) -> QueryResult:
    """The `k` passages of `kb` that best answer `text`, optionally only from `documents` (ids) or documents with
    any of `tags`; `not_found` when nothing retrieved is relevant."""
    text = (text or "").strip()
    if not text:
        raise ValidationError({"query": [_("Ask something.")]})
    if len(text) > 2000:
        raise ValidationError({"query": [_("Keep the question under 2000 characters.")]})
    if mode not in MODES:
        raise ValidationError({"mode": [_("Choose hybrid, lexical or dense.")]})
    if not 1 <= k <= 50:
        raise ValidationError({"k": [_("Ask for 1 to 50 passages.")]})
    loaded = load_index(kb)
    mask = None
    if documents or tags:
        allowed = Document.objects.filter(knowledge_base=kb)
        if documents:
            allowed = allowed.filter(pk__in=documents)
        if tags:
            wanted = clean_tags(list(tags))
            allowed = [d for d, t in allowed.values_list("pk", "tags") if set(t) & set(wanted)]
        else:
            allowed = list(allowed.values_list("pk", flat=True))
        mask = np.isin(loaded.document_ids, np.array(allowed, dtype=np.int64))
    result = loaded.index.search(text, k=k, mask=mask, mode=mode)
    positions = [h.position for h in result.hits]
    chunks = Chunk.objects.select_related("document").in_bulk([int(loaded.chunk_ids[p]) for p in positions])
    passages = [
        Passage(n, chunks[int(loaded.chunk_ids[h.position])], h)
        for n, h in enumerate(result.hits, start=1)
        if int(loaded.chunk_ids[h.position]) in chunks
    ]
    not_found = result.not_found or not passages
    return QueryResult(text, passages, not_found, result.best_dense, result.best_lexical)
