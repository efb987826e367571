"""Answers: the passages retrieval finds for a question, laid out for the knowledge base's chat model as
`prompts.CHOSEN` says (measured: docs/knowledge.md), its answer streamed, and the passages the answer really rests on
cited at its end as [1], [2] — checked by the portal (`prompts.cited`), never taken from the model's own markers.
When retrieval finds nothing relevant the answer is "not found" and no model is asked."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.knowledge import prompts, services
from apps.knowledge.llm import Endpoint, LLMError, stream_chat
from apps.knowledge.models import KnowledgeBase
from apps.serving.llm import ChatError, client_for
from portal.lib.outbound import private_address, refusal

NOT_FOUND = prompts.NOT_FOUND


def endpoint_for(kb: KnowledgeBase) -> Endpoint | None:
    """The base's external OpenAI-compatible endpoint, its key read from the project secret it names; None when the
    base is answered by one of the project's `llm` services (its replica is found when the answer starts). A base
    with neither is a field error."""
    if kb.llm_service_id:
        return None
    if not kb.llm_url or not kb.llm_model:
        raise ValidationError(
            {"llm_url": [_("This knowledge base has no LLM endpoint: set one in its settings to get answers.")]}
        )
    if found := private_address(kb.llm_url):  # the name may resolve somewhere else than when it was saved
        raise ValidationError({"llm_url": [refusal(found)]})
    key = ""
    if kb.llm_key_secret:
        secret = kb.project.secrets.filter(name=kb.llm_key_secret).first()
        if secret is None:
            raise ValidationError({"llm_key_secret": [_("The project secret holding the API key is gone.")]})
        key = secret.value or ""
    return Endpoint(kb.llm_url, kb.llm_model, key)


def _service_endpoint(kb: KnowledgeBase) -> Endpoint:
    """A ready replica of the base's `llm` service (straight, not through the router: access to the base was checked
    by the caller, and the service is the base's own project's)."""
    try:
        client = client_for(kb.llm_service)
    except ChatError as exc:
        raise LLMError(
            _("The chat service “%(name)s” cannot answer yet: %(reason)s (a starting replica loads its model first).")
            % {"name": kb.llm_service.name, "reason": exc}
        ) from None
    return Endpoint(client.base_url, client.model)


def not_ready(kb: KnowledgeBase) -> str:
    """Why the base's chat service cannot answer now ("" when it can, or when the base has none)."""
    if not kb.llm_service_id:
        return ""
    try:
        _service_endpoint(kb)
    except LLMError as exc:
        return str(exc)
    return ""


def sources_of(passages: list[services.Passage]) -> list[prompts.Source]:
    return [prompts.Source(p.number, p.chunk.document.name, p.chunk.heading, p.chunk.text) for p in passages]


@dataclass
class Answer:
    result: services.QueryResult
    tokens: Iterator[str]
    # The numbers of the passages the answer rests on, known once `tokens` is exhausted (empty: it rests on none).
    cited: list[int] = field(default_factory=list)


def _generate(kb: KnowledgeBase, endpoint: Endpoint | None, answer: Answer) -> Iterator[str]:
    design = prompts.CHOSEN
    sources = sources_of(answer.result.passages)
    if endpoint is None:
        endpoint = _service_endpoint(kb)
    state = prompts.CitationFilter()
    pieces = stream_chat(
        endpoint,
        prompts.messages(design, answer.result.query, sources),
        max_tokens=settings.PORTAL_KNOWLEDGE_MAX_TOKENS,
        temperature=design.temperature,
    )
    yield from prompts.filtered(pieces, state)
    text = "".join(state.text)
    answer.cited = prompts.cited(text, sources)
    if text.strip() == NOT_FOUND:
        return
    if answer.cited:
        yield " " + "".join(f"[{n}]" for n in answer.cited)
    else:
        yield "\n\n" + _("(The passages do not support this answer: check them before relying on it.)")


def answer(kb: KnowledgeBase, question: str) -> Answer:
    """Retrieve, then stream the model's answer and its verified citations (or "not found" without asking it). The
    configuration is checked first, so a base without a model answers a field error before anything streams. The
    passages are the ones the model is shown (`prompts.CHOSEN.passages`)."""
    endpoint = endpoint_for(kb)
    result = services.query(kb, question, k=prompts.CHOSEN.passages)
    if result.not_found:
        return Answer(result, iter([NOT_FOUND]))
    reply = Answer(result, iter(()))
    reply.tokens = _generate(kb, endpoint, reply)
    return reply
