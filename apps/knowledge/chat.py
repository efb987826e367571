"""Answers: the passages retrieval finds for a question, numbered, handed to the knowledge base's LLM, which answers
citing them as [1], [2]. When retrieval finds nothing relevant the answer is "not found" and no LLM is asked."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from apps.knowledge import services
from apps.knowledge.llm import Endpoint, stream_chat
from apps.knowledge.models import KnowledgeBase

NOT_FOUND = "Not found in the knowledge base."
PASSAGE_CHARS = 1500

SYSTEM = (
    "You answer questions using only the numbered passages below, which come from a knowledge base. "
    "Cite the passages you use as [1], [2] right after the sentence they support. "
    f"If the passages do not contain the answer, reply exactly: {NOT_FOUND} Do not use any other knowledge."
)


def endpoint_for(kb: KnowledgeBase) -> Endpoint:
    """The base's OpenAI-compatible endpoint, its key read from the project secret it names."""
    if not kb.llm_url or not kb.llm_model:
        raise ValidationError(
            {"llm_url": [_("This knowledge base has no LLM endpoint: set one in its settings to get answers.")]}
        )
    key = ""
    if kb.llm_key_secret:
        secret = kb.project.secrets.filter(name=kb.llm_key_secret).first()
        if secret is None:
            raise ValidationError({"llm_key_secret": [_("The project secret holding the API key is gone.")]})
        key = secret.value or ""
    return Endpoint(kb.llm_url, kb.llm_model, key)


def messages_for(question: str, passages: list[services.Passage]) -> list[dict[str, str]]:
    context = "\n\n".join(
        f"[{p.number}] ({p.chunk.document.name}{' › ' + p.chunk.heading if p.chunk.heading else ''})\n"
        f"{p.chunk.text[:PASSAGE_CHARS]}"
        for p in passages
    )
    return [
        {"role": "system", "content": f"{SYSTEM}\n\nPassages:\n\n{context}"},
        {"role": "user", "content": question},
    ]


@dataclass
class Answer:
    result: services.QueryResult
    tokens: Iterator[str]


def answer(kb: KnowledgeBase, question: str, k: int = 4) -> Answer:
    """Retrieve, then stream the LLM's answer (or "not found" without asking it). The endpoint is checked first, so
    a base without one answers a field error before anything streams."""
    endpoint = endpoint_for(kb)
    result = services.query(kb, question, k=k)
    if result.not_found:
        return Answer(result, iter([NOT_FOUND]))
    messages = messages_for(result.query, result.passages)
    return Answer(result, stream_chat(endpoint, messages, max_tokens=settings.PORTAL_KNOWLEDGE_MAX_TOKENS))
