"""The LoRA fine-tune's instruction files and arguments, checked before any model loads: a bad row fails the task
with its line number and the reason, in the portal's own interpreter (no torch needed to refuse bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.jobs.builtin_tasks import _llm
from apps.jobs.builtin_tasks._common import TaskError
from tests.jobs.test_builtin_tasks import run_task

GOOD = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Topic: sport"}]}


def jsonl(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "line 3: not JSON"),
        ("[1, 2]", "line 3: expected a JSON object, got list"),
        (json.dumps({"text": "x"}), "line 3: a row needs 'messages', or 'prompt' and 'completion'"),
        (json.dumps({"prompt": "Hi?"}), "line 3: completion must be a non-empty string"),
        (json.dumps({"messages": [{"role": "user", "content": "Hi?"}]}),
         "line 3: the last message must be the assistant's"),
        (json.dumps({"messages": [{"role": "bot", "content": "x"}]}), "line 3: messages[0].role 'bot' is not one of"),
        (json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]}),
         "line 3: messages[1].content must be a non-empty string"),
        (json.dumps({"messages": [{"role": "system", "content": "Be brief"}, {"role": "assistant", "content": "ok"}]}),
         "line 3: no user message before the assistant's answer"),
    ],
)  # fmt: skip
def test_a_bad_row_fails_the_task_naming_its_line_and_why(tmp_path, bad, message):
    data = jsonl(tmp_path / "data.jsonl", json.dumps(GOOD), "", bad)  # line 2 is blank: skipped, still counted

    done = run_task("llm_lora_finetune", tmp_path / "out", "--dataset", str(data))

    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "out" / "model").exists()


def test_a_folder_with_several_jsonl_files_must_name_one(tmp_path):
    folder = tmp_path / "version"
    folder.mkdir()
    jsonl(folder / "a.jsonl", json.dumps(GOOD))
    jsonl(folder / "b.jsonl", json.dumps(GOOD))

    done = run_task("llm_lora_finetune", tmp_path / "out", "--dataset", str(folder))
    assert done.returncode == 2
    assert "the dataset holds 2 JSONL files (a.jsonl, b.jsonl); choose one with --file" in done.stderr

    assert _llm.find_jsonl(folder, "b.jsonl") == (folder / "b.jsonl").resolve()
    with pytest.raises(TaskError, match="not a file of the dataset version"):
        _llm.find_jsonl(folder, "../b.jsonl")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lora_r", "0"], "--lora_r must be at least 1"),
        (["--epochs", "0"], "give epochs above 0, or max_steps of at least 1"),
        (["--learning_rate", "0"], "--learning_rate and --lora_alpha must be greater than 0"),
        (["--heldout_fraction", "1"], "must be in [0, 1)"),
        (["--target_modules", " , "], "--target_modules: name at least one module"),
    ],
)
def test_bad_arguments_are_refused_before_anything_loads(tmp_path, args, message):
    data = jsonl(tmp_path / "data.jsonl", json.dumps(GOOD))

    done = run_task("llm_lora_finetune", tmp_path / "out", "--dataset", str(data), *args)

    assert done.returncode == 2
    assert message in done.stderr


def test_both_row_shapes_become_a_prompt_and_the_answer_to_learn():
    chat = _llm.parse_row(1, json.dumps({"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."},
    ]}))  # fmt: skip
    pair = _llm.parse_row(2, json.dumps({"prompt": "Hi?", "completion": "Hello."}))

    assert chat.prompt == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert chat.completion == pair.completion == "Hello."
    assert pair.prompt == [{"role": "user", "content": "Hi?"}]
    assert pair.as_row() == {
        "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    }


def test_the_held_out_split_is_seeded_and_keeps_a_row_on_each_side():
    rows = [_llm.Example(i, [{"role": "user", "content": str(i)}], "x") for i in range(1, 21)]

    train, held = _llm.split(rows, 0.2, seed=7)

    assert len(held) == 4
    assert len(train) == 16
    assert {e.line for e in train} | {e.line for e in held} == set(range(1, 21))
    assert _llm.split(rows, 0.2, seed=7) == (train, held)
    assert _llm.split(rows, 0.2, seed=8) != (train, held)
    assert _llm.split(rows[:2], 0.01, seed=1)[1] != []  # at least one held out
    assert _llm.split(rows[:2], 0.9, seed=1)[0] != []  # at least one to train on
    assert _llm.split(rows, 0, seed=1) == (rows, [])
    with pytest.raises(TaskError, match="at least 2 rows"):
        _llm.split(rows[:1], 0.1, seed=1)


def test_a_base_model_folder_without_a_model_is_refused(tmp_path):
    with pytest.raises(TaskError, match="holds no model"):
        _llm.resolve_base(str(tmp_path), tmp_path / "download")
    with pytest.raises(TaskError, match="is not a folder"):
        _llm.resolve_base(str(tmp_path / "nowhere"), tmp_path / "download")
