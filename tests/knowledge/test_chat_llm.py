"""Chat end to end against the real model: the portal's `llm` model-server runtime serving the packaged
SmolLM2-135M-Instruct (tests/serving/llm.py; skipped, saying why, where .venv-llm is not built)."""

from __future__ import annotations

import json

import pytest

from apps.knowledge.chat import NOT_FOUND
from tests.conftest import user_client
from tests.knowledge.factories import ingested, knowledge_base
from tests.knowledge.test_chat import sse
from tests.serving.llm import llm_server  # noqa: F401  (the session's model server)

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(world, llm_server, settings):  # noqa: F811
    settings.PORTAL_KNOWLEDGE_MAX_TOKENS = 24  # a short answer: the test is about the wiring, not the prose
    base = knowledge_base(world.project_a, world.alice, llm_url=f"{llm_server.url}/v1", llm_model=llm_server.name)
    ingested(base)
    return base


def test_the_answer_streams_token_by_token_after_its_passages(world, kb):
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "How do I run the tests?", "stream": True}, format="json"
    )
    events = sse(response)
    names = [name for name, _data in events]
    assert names[0] == "passages"
    assert names[-1] == "done", events[-1]
    tokens = [data for name, data in events if name == "token"]
    assert len(tokens) > 3  # streamed piece by piece, not one block
    assert "".join(tokens).strip()
    top = kb.chunks.get(text__contains="make test")
    assert events[0][1]["passages"][0]["chunk"] == top.pk
    assert events[0][1]["not_found"] is False


def test_the_page_stream_links_each_citation_to_its_passage(world, kb, client):
    client.force_login(world.bob)
    events = sse(client.get(f"/p/project-a/knowledge/{kb.pk}/chat/stream/", {"q": "How do I roll back a deploy?"}))
    passages = events[0][1]["passages"]
    assert [p["number"] for p in passages] == list(range(1, len(passages) + 1))
    rollback = kb.chunks.get(text__contains="roll back")
    assert f"#chunk-{rollback.pk}" in json.dumps(passages)
    assert events[-1][0] == "done"


def test_not_found_never_reaches_the_model(world, kb, llm_server):  # noqa: F811
    before = llm_server.metric("modelserver_llm_generations_total")
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "What is the capital of Peru?"}, format="json"
    )
    assert response.json()["answer"] == NOT_FOUND
    assert llm_server.metric("modelserver_llm_generations_total") == before
