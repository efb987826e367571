"""The `llm` runtime of the model server, spoken to directly over HTTP: OpenAI's chat completions (plain and
streamed), the parameters it honours, token usage, its errors, and what the control plane asks every replica.
One real process on the packaged SmolLM2-135M-Instruct for the session (tests/serving/llm.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serving import llm as llm_fixtures

pytestmark = pytest.mark.live
llm_server = llm_fixtures.llm_server

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]


def post(server, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120, **kwargs)


def events(response: httpx.Response) -> list:
    """The data of each server-sent event, parsed (the last one, [DONE], as the string)."""
    out = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_it_answers_a_chat_completion_with_usage(llm_server):
    response = post(llm_server, {"model": "chat", "messages": QUESTION, "max_tokens": 30, "temperature": 0})

    assert response.status_code == 200, response.text
    document = response.json()
    assert document["object"] == "chat.completion"
    assert document["id"].startswith("chatcmpl-")
    assert document["model"] == "chat"
    choice = document["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    usage = document["usage"]
    assert usage["prompt_tokens"] > 10
    assert 0 < usage["completion_tokens"] < 30
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_max_tokens_cuts_the_answer_and_says_length(llm_server):
    document = post(llm_server, {"messages": COUNT, "max_tokens": 3, "temperature": 0}).json()

    assert document["choices"][0]["finish_reason"] == "length"
    assert document["usage"]["completion_tokens"] == 3


def test_a_stop_sequence_ends_the_answer_before_it(llm_server):
    full = post(llm_server, {"messages": COUNT, "max_tokens": 40, "temperature": 0}).json()
    stopped = post(llm_server, {"messages": COUNT, "max_tokens": 40, "temperature": 0, "stop": ["5"]}).json()

    text = full["choices"][0]["message"]["content"]
    assert "5" in text
    assert stopped["choices"][0]["message"]["content"] == text[: text.index("5")]
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] < full["usage"]["completion_tokens"]


def test_a_seed_makes_sampling_repeatable_and_temperature_samples(llm_server):
    story = [{"role": "user", "content": "Invent a name for a cat."}]
    body = {"messages": story, "max_tokens": 12, "temperature": 1.5, "top_p": 1}
    first = [post(llm_server, {**body, "seed": 7}).json()["choices"][0]["message"]["content"] for _ in range(2)]
    others = {post(llm_server, {**body, "seed": seed}).json()["choices"][0]["message"]["content"] for seed in range(4)}

    assert first[0] == first[1]
    assert len(others | {first[0]}) > 1


def test_it_streams_chunks_in_openais_format_then_done(llm_server):
    body = {"messages": QUESTION, "max_tokens": 30, "temperature": 0, "stream": True}
    response = post(llm_server, {**body, "stream_options": {"include_usage": True}})
    plain = post(llm_server, {"messages": QUESTION, "max_tokens": 30, "temperature": 0}).json()

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    found = events(response)
    assert found[-1] == "[DONE]"
    chunks = found[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert len([p for p in pieces if p]) > 2  # token by token, not one block
    assert "".join(pieces) == plain["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == plain["usage"]


def test_it_lists_the_served_model(llm_server):
    listed = httpx.get(f"{llm_server.url}/v1/models").json()

    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == ["chat"]
    assert httpx.get(f"{llm_server.url}/v1/models/chat").json()["id"] == "chat"
    assert httpx.get(f"{llm_server.url}/v1/models/other").status_code == 404


def test_it_answers_the_control_planes_probes(llm_server):
    assert httpx.get(f"{llm_server.url}/v2/health/ready").json() == {"ready": True}
    metadata = httpx.get(f"{llm_server.url}/v2/models/chat").json()
    assert metadata["platform"] == "llm"
    assert metadata["parameters"]["model"] == "SmolLM2-135M-Instruct"
    assert metadata["parameters"]["endpoint"] == "/v1/chat/completions"
    assert llm_server.metric("modelserver_llm_completion_tokens_total") > 0


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0]", "role must be one of"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0]", "content must be a string"),
        ({"messages": QUESTION, "max_tokens": 0}, "max_tokens", "from 1 to"),
        ({"messages": QUESTION, "max_tokens": "ten"}, "max_tokens", "integer"),
        ({"messages": QUESTION, "temperature": 3}, "temperature", "from 0 to 2"),
        ({"messages": QUESTION, "top_p": -1}, "top_p", "from 0 to 1"),
        ({"messages": QUESTION, "stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
        ({"messages": QUESTION, "n": 2}, "n", "n must be 1"),
        ({"messages": QUESTION, "stream": "yes"}, "stream", "true or false"),
        ({"messages": QUESTION, "seed": -1}, "seed", "seed"),
        ({"messages": QUESTION, "presence_penalty": 1}, "presence_penalty", "not supported"),
        ({"messages": QUESTION, "stream_options": {"include_usage": True}}, "stream_options", "stream: true"),
        ({"messages": QUESTION, "max_tokens": 9000}, "max_tokens", "from 1 to 8191"),
    ],
)
def test_bad_requests_get_a_400_naming_the_parameter(llm_server, body, param, fragment):
    response = post(llm_server, body)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert fragment in error["message"]


def test_a_prompt_beyond_the_context_is_a_400(llm_server):
    long = [{"role": "user", "content": "word " * 8000}]

    response = post(llm_server, {"messages": long, "max_tokens": 500})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_body_model_and_method_errors(llm_server):
    assert post(llm_server, {"messages": QUESTION, "model": "gpt-4"}).status_code == 404
    not_json = httpx.post(f"{llm_server.url}/v1/chat/completions", content=b"{nope", timeout=30)
    assert not_json.status_code == 400
    assert "not JSON" in not_json.json()["error"]["message"]
    assert httpx.get(f"{llm_server.url}/v1/chat/completions").status_code == 405
    assert httpx.get(f"{llm_server.url}/v1/elsewhere").status_code == 404
