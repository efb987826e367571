"""Chat: "not found" without asking the LLM, a base without an endpoint refused with a field error, and an endpoint
that cannot be reached reported as an error event (never an invented answer). Answers from a real model are
tested once the portal's `llm` runtime is merged (docs/knowledge.md)."""

from __future__ import annotations

import json
import socket

import pytest

from apps.knowledge.chat import NOT_FOUND
from tests.conftest import user_client
from tests.knowledge.factories import ingested, knowledge_base

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sse(response) -> list[tuple[str, object]]:
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture
def kb(world):
    base = knowledge_base(
        world.project_a, world.alice, llm_url=f"http://127.0.0.1:{closed_port()}/v1", llm_model="smollm2"
    )
    ingested(base)
    return base


def test_a_question_nothing_answers_is_not_found_without_asking_the_llm(world, kb):
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "What is the capital of Peru?"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["answer"] == NOT_FOUND
    assert response.json()["not_found"] is True


def test_the_stream_sends_passages_then_the_not_found_answer(world, kb):
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/",
        {"question": "What is the capital of Peru?", "stream": True},
        format="json",
    )
    assert response["Content-Type"].startswith("text/event-stream")
    events = sse(response)
    assert [name for name, _data in events] == ["passages", "token", "done"]
    assert events[0][1]["not_found"] is True
    assert events[1][1] == NOT_FOUND


def test_an_unreachable_endpoint_is_an_error_not_an_answer(world, kb, client):
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "How do I run the tests?"}, format="json"
    )
    assert response.status_code == 502
    assert "cannot be reached" in response.json()["detail"]

    client.force_login(world.bob)
    page = client.get(f"/p/project-a/knowledge/{kb.pk}/chat/stream/", {"q": "How do I run the tests?"})
    events = sse(page)
    assert events[0][0] == "passages"
    top = kb.chunks.get(text__contains="make test")
    assert events[0][1]["passages"][0]["url"] == f"/p/project-a/knowledge/documents/{top.document_id}/#chunk-{top.pk}"
    assert events[-1][0] == "error"
    assert "cannot be reached" in events[-1][1]


def test_a_base_without_an_llm_says_so(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "How do I run the tests?"}, format="json"
    )
    assert response.status_code == 400
    assert "llm_url" in response.json()
    client.force_login(world.bob)
    page = client.get(f"/p/project-a/knowledge/{kb.pk}/chat/")
    assert "has no LLM endpoint" in page.content.decode()
    assert sse(client.get(f"/p/project-a/knowledge/{kb.pk}/chat/stream/", {"q": "x"}))[0][0] == "error"


def test_the_key_secret_must_exist(world):
    response = user_client(world.alice).post(
        "/api/v1/knowledge-bases/",
        {"project": "project-a", "name": "ext", "llm_url": "https://llm.example/v1", "llm_model": "m",
         "llm_key_secret": "NOPE"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400
    assert "llm_key_secret" in response.json()
