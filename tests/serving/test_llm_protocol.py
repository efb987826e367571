"""The llm runtime's pure parts, without a model: how a chat request is read (roles, text parts, defaults), and
which generated text may be sent while it could still turn into a stop sequence or is half a character."""

from __future__ import annotations

import json

import pytest

from apps.serving.modelserver.llm import LoadError, _safe_end, _stop_at, resolve
from apps.serving.modelserver.openai import DEFAULT_MAX_TOKENS, RequestError, parse_chat


def parse(body: dict):
    return parse_chat(json.dumps(body).encode(), "chat", 8191)


def test_it_reads_roles_text_parts_and_defaults():
    request = parse({"messages": [{"role": "developer", "content": "Be brief."},
                                  {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                               {"type": "text", "text": "there"}]}]})  # fmt: skip

    assert request.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert (request.max_tokens, request.temperature, request.top_p) == (DEFAULT_MAX_TOKENS, 1.0, 1.0)
    assert (request.stop, request.seed, request.stream) == ((), None, False)


def test_max_completion_tokens_wins_and_a_single_stop_is_a_list_of_one():
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "max_completion_tokens": 7}
    options = {"stop": "END", "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    request = parse({**body, **options})

    assert (request.max_tokens, request.stop, request.temperature) == (7, ("END",), 0.0)
    assert (request.stream, request.include_usage) == (True, True)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([1, 2], None),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
        (
            {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
            "response_format",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": True}, "temperature"),
    ],
)
def test_what_it_refuses_names_the_parameter(body, param):
    with pytest.raises(RequestError) as caught:
        parse(body)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_another_model_is_a_404():
    with pytest.raises(RequestError) as caught:
        parse({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")


def test_text_that_may_begin_a_stop_sequence_or_ends_mid_character_is_held_back():
    assert _safe_end("Hello wor", ("world!",)) == len("Hello ")
    assert _safe_end("Hello", ("###",)) == 5
    assert _safe_end("Hi #", ("###",)) == 3
    assert _safe_end("caf\ufffd", ()) == 3
    assert _stop_at("1, 2, 3", (", 3", "2"), 0) == 3
    assert _stop_at("abc", ("x",), 0) is None


def test_a_model_path_that_holds_nothing_servable_says_why(tmp_path):
    with pytest.raises(LoadError, match="no model at"):
        resolve(str(tmp_path / "missing"))
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(LoadError, match=r"several \.gguf files"):
        resolve(str(tmp_path))
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text('{"base_model_name_or_path": "org/elsewhere"}')
    with pytest.raises(LoadError, match="not on this machine: give --base-model"):
        resolve(str(tmp_path / "adapter"))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert resolve(str(hf)).folder == hf
    assert resolve(str(tmp_path / "adapter"), str(hf)).adapter == tmp_path / "adapter"
