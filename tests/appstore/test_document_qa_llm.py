"""The installed `document-qa` app answers one question from its handbook with the packaged chat model: its chat
service's replica is a real `llm` model server (SmolLM2-135M-Instruct, .venv-llm), and the answer cites the expenses
passage. Skipped, saying why, only where .venv-llm is not built (tests/serving/llm.py)."""

from __future__ import annotations

import pytest

from apps.appstore.services import install
from apps.knowledge import services as knowledge
from tests.appstore.factories import builtin_version
from tests.conftest import user_client
from tests.serving import llm as llm_fixtures
from tests.serving.replicas import add_revision

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def llm_server():
    """A replica of the app's service as the agent would start it: the model server answers to the service's name
    (`qa-chat`), so the session's shared `chat` server cannot stand in for it."""
    if reason := llm_fixtures.llm_env_missing():
        pytest.skip(reason)
    server = llm_fixtures.LLMServer("qa-chat").start()
    yield server
    server.stop()


def test_the_installed_app_answers_from_the_handbook_citing_it(world, llm_server, settings):
    settings.PORTAL_KNOWLEDGE_MAX_TOKENS = 64
    installation = install(builtin_version("document-qa"), world.project_a, world.alice, name="qa")
    [kb] = installation.objects_of("knowledge_bases")
    [service] = installation.objects_of("services")
    assert kb.llm_service == service
    service.current_revision = add_revision(service, 1, llm_server)  # what the agent's deploy would make
    service.save()
    for doc in kb.documents.all():
        knowledge.ingest_document(doc.pk)

    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/",
        {"question": "How many days do I have to file an expense claim?"},
        format="json",
    )

    body = response.json()
    assert response.status_code == 200, body
    assert "30" in body["answer"], body["answer"]
    cited = [p for p in body["passages"] if p["number"] in body["cited"]]
    assert cited, body
    assert all(p["document_name"] == "expenses.md" and "30 days" in p["text"] for p in cited), cited
