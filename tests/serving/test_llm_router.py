"""An `llm` service through the serving router with a project token: OpenAI's chat completions over a plain HTTP
client, streamed piece by piece through the router (not buffered), errors passed through, other tenants kept out;
and the portal's own client (apps.serving.llm) on the same replica. The replica is the real llm model server on the
packaged SmolLM2-135M-Instruct (tests/serving/llm.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from apps.serving.llm import ChatError, client_for
from apps.serving.models import Framework
from apps.serving.router.asgi import invalidate
from tests.factories import make_token
from tests.serving import llm as llm_fixtures
from tests.serving.replicas import add_revision, make_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
llm_server = llm_fixtures.llm_server

CHAT = "/serving/project-a/chat/v1/chat/completions"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def chat_service(world, llm_server):
    service = make_service(world.project_a, "chat")
    service.framework = Framework.LLM
    service.current_revision = add_revision(service, 1, llm_server)
    service.save()
    invalidate()
    return service


def client(live_asgi, user) -> httpx.Client:
    return httpx.Client(base_url=live_asgi.url, headers={"Authorization": f"Bearer {make_token(user)}"}, timeout=120)


def test_a_member_gets_a_chat_completion_through_the_router(world, live_asgi, chat_service):
    with client(live_asgi, world.bob) as bob:
        response = bob.post(CHAT, json={"model": "chat", "messages": QUESTION, "max_tokens": 30, "temperature": 0})
        models = bob.get("/serving/project-a/chat/v1/models")

    assert response.status_code == 200, response.text
    assert response.headers["x-portal-revision"] == "1"
    assert "Paris" in response.json()["choices"][0]["message"]["content"]
    assert response.json()["usage"]["completion_tokens"] > 0
    assert [m["id"] for m in models.json()["data"]] == ["chat"]


def test_a_stream_passes_through_the_router_as_it_is_generated(world, live_asgi, chat_service, llm_server):
    story = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]
    body = {"messages": story, "max_tokens": 150, "temperature": 0, "stream": True}
    generations = llm_server.metric("modelserver_llm_generations_total")
    with client(live_asgi, world.alice) as alice, alice.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        content = next(line for line in lines if line.startswith("data: ") and '"content":"' in line[30:])
        # Two events arrived while the replica is still generating: the router relays, it does not buffer.
        still_running = llm_server.metric("modelserver_llm_generations_total") == generations
        rest = [line for line in lines if line.startswith("data: ")]

    assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
    assert json.loads(content[6:])["choices"][0]["delta"]["content"]
    assert still_running
    assert rest[-1] == "data: [DONE]"


def test_a_bad_request_is_the_replicas_400_in_openais_shape(world, live_asgi, chat_service):
    with client(live_asgi, world.alice) as alice:
        response = alice.post(CHAT, json={"messages": QUESTION, "temperature": 9})

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "temperature"


def test_other_tenants_and_strangers_are_kept_out(world, live_asgi, chat_service):
    with client(live_asgi, world.charlie) as charlie:
        assert charlie.post(CHAT, json={"messages": QUESTION}).status_code == 404
        assert charlie.get("/serving/project-a/chat/v1/models").status_code == 404
    anonymous = httpx.post(f"{live_asgi.url}{CHAT}", json={"messages": QUESTION}, timeout=30)
    assert anonymous.status_code == 401


def test_the_portals_client_completes_and_streams_on_a_replica(chat_service):
    chat = client_for(chat_service)

    result = chat.complete(QUESTION, max_tokens=30, temperature=0)
    pieces = list(chat.stream(QUESTION, max_tokens=30, temperature=0))

    assert "Paris" in result.text
    assert result.finish_reason == "stop"
    assert result.usage["completion_tokens"] > 0
    assert len(pieces) > 2
    assert "".join(pieces) == result.text
    with pytest.raises(ChatError) as bad:
        chat.complete(QUESTION, max_tokens=0)
    assert bad.value.status == 400
    assert "max_tokens" in str(bad.value)


def test_the_portals_client_refuses_a_service_that_cannot_chat(world, chat_service):
    iris = make_service(world.project_a, "iris")
    with pytest.raises(ChatError, match="does not serve a chat model"):
        client_for(iris)
    chat_service.current_revision = None
    chat_service.save()
    with pytest.raises(ChatError, match="no ready replica"):
        client_for(chat_service)
