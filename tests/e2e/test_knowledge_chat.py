"""The knowledge base chat page in a real browser: a question streams an answer from the portal's `llm` runtime
(SmolLM2-135M, tests/serving/llm.py) and lists the numbered passages it was given, each linked to its place."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.knowledge.factories import ingested, knowledge_base
from tests.serving.llm import llm_server  # noqa: F401  (the session's model server)

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

ANSWER_SECONDS = 240_000  # ms: a loaded CPU generates a few tokens a second


def test_asking_a_question_streams_an_answer_with_linked_passages(browsing, world, llm_server, settings):  # noqa: F811
    settings.PORTAL_KNOWLEDGE_MAX_TOKENS = 24
    kb = knowledge_base(world.project_a, world.alice, llm_url=f"{llm_server.url}/v1", llm_model=llm_server.name)
    ingested(kb)
    top = kb.chunks.get(text__contains="make test")
    b = browsing
    b.log_in("bob", PASSWORD)
    b.goto(f"/p/project-a/knowledge/{kb.pk}/chat/")
    b.page.fill("#kb-chat-question", "How do I run the tests?")
    b.page.get_by_role("button", name="Ask").click()
    first = b.page.locator("#kb-chat-passages li a").first
    expect(first).to_have_attribute("href", re.compile(rf"#chunk-{top.pk}$"), timeout=ANSWER_SECONDS)
    answer = b.page.locator("#kb-chat-answer")
    expect(answer).to_have_attribute("data-state", "done", timeout=ANSWER_SECONDS)
    assert answer.inner_text().strip()
    b.screenshot("answered")

    b.page.fill("#kb-chat-question", "What is the capital of Peru?")
    b.page.get_by_role("button", name="Ask").click()
    expect(answer).to_have_text("Not found in the knowledge base.", timeout=ANSWER_SECONDS)
