"""The demo's knowledge base (the portal's README and docs/) answered by a real `llm` service on the packaged
SmolLM2-135M-Instruct, as `make run` wires it: "How do I run the tests?" gets `make test`, citing the README passage
that says so, and a question about something the documents do not hold gets "not found". Skipped, saying why, only
where .venv-llm is not built (tests/serving/llm.py)."""

from __future__ import annotations

import pytest

from apps.knowledge import demo, services
from apps.knowledge.chat import NOT_FOUND
from apps.serving.models import Framework
from tests.conftest import user_client
from tests.knowledge.test_chat import sse
from tests.serving import llm as llm_fixtures
from tests.serving.replicas import add_revision, make_service

pytestmark = pytest.mark.django_db
llm_server = llm_fixtures.llm_server


@pytest.fixture
def demo_base(world, llm_server, settings):
    settings.PORTAL_KNOWLEDGE_MAX_TOKENS = 64
    service = make_service(world.project_a, "chat")
    service.framework = Framework.LLM
    service.current_revision = add_revision(service, 1, llm_server)
    service.save()
    kb = demo.populate(world.project_a, world.alice)
    for doc in kb.documents.all():
        services.ingest_document(doc.pk)
    kb = demo.wire_chat(world.project_a, service)
    assert kb.llm_service == service
    return kb


def test_the_demo_base_answers_how_to_run_the_tests_citing_the_readme(world, demo_base):
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{demo_base.pk}/chat/", {"question": "How do I run the tests?"}, format="json"
    )
    body = response.json()
    assert response.status_code == 200, body
    assert "make test" in body["answer"], body["answer"]
    cited = [p for p in body["passages"] if p["number"] in body["cited"]]
    assert cited, body
    assert all(p["document_name"] == "README.md" and "make test" in p["text"] for p in cited), cited
    assert body["answer"].endswith("".join(f"[{n}]" for n in body["cited"]))


def test_the_stream_ends_with_the_verified_citations(world, demo_base):
    events = sse(
        user_client(world.bob).post(
            f"/api/v1/knowledge-bases/{demo_base.pk}/chat/",
            {"question": "How do I run the tests?", "stream": True},
            format="json",
        )
    )
    assert [name for name, _data in events][:1] == ["passages"]
    assert events[-1][0] == "done", events[-1]
    text = "".join(data for name, data in events if name == "token")
    assert events[-1][1]["cited"]
    assert text.endswith("".join(f"[{n}]" for n in events[-1][1]["cited"]))


def test_an_absent_topic_is_not_found(world, demo_base, llm_server):
    before = llm_server.metric("modelserver_llm_generations_total")
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{demo_base.pk}/chat/", {"question": "What is the capital of Peru?"}, format="json"
    )
    assert response.json()["answer"] == NOT_FOUND
    assert response.json()["cited"] == []
    assert llm_server.metric("modelserver_llm_generations_total") == before
