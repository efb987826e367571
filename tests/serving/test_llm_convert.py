"""The packaged model's converted folder (`make llm-env`, apps/serving/modelserver/llm_convert.py): used by the model
server and the fine-tune/evaluation tasks only while its source.json names the packaged GGUF file (name and size for
the server, SHA-256 for the tasks, which hash the file anyway), else the GGUF file itself; and in the built `llm`
environment it holds the very weights, tokenizer and chat template that loading the GGUF file gives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings

from apps.jobs.builtin_tasks import _llm
from apps.serving.modelserver import llm
from tests.serving.llm import LLM_PYTHON, llm_env_missing

GGUF_BYTES = b"GGUF" + bytes(60)


@pytest.fixture
def prefix(tmp_path, monkeypatch) -> Path:
    """An environment prefix of the test's own, where the converted folder is looked for."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    return tmp_path / "venv"


def converted(prefix: Path, gguf: Path, **source) -> Path:
    folder = prefix / "share" / "portal-llm" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    recorded = {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": _llm.sha256_of([gguf], gguf.parent)}
    (folder / "source.json").write_text(json.dumps({**recorded, **source}))
    return folder


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "package" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path.parent.mkdir()
    path.write_bytes(GGUF_BYTES)
    return path


def test_the_folder_converted_from_this_file_is_used(prefix, gguf):
    folder = converted(prefix, gguf)

    assert llm.converted_folder() == folder
    assert llm.converted_from(gguf) == folder
    assert _llm.converted_from(_llm.sha256_of([gguf], gguf.parent)) == folder


def test_a_folder_converted_from_another_file_is_not(prefix, gguf):
    converted(prefix, gguf, size=len(GGUF_BYTES) + 1, sha256="0" * 64)

    assert llm.converted_from(gguf) is None
    assert _llm.converted_from(_llm.sha256_of([gguf], gguf.parent)) is None


def test_no_folder_a_half_written_one_or_an_unreadable_source_is_not(prefix, gguf):
    digest = _llm.sha256_of([gguf], gguf.parent)
    assert llm.converted_from(gguf) is None
    assert _llm.converted_from(digest) is None

    folder = converted(prefix, gguf)
    (folder / "config.json").unlink()
    assert llm.converted_from(gguf) is None
    assert _llm.converted_from(digest) is None

    (folder / "config.json").write_text("{}")
    (folder / "source.json").write_text("not json")
    assert llm.converted_from(gguf) is None
    assert _llm.converted_from(digest) is None


SAME_AS_THE_GGUF = textwrap.dedent("""
    import json, torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from apps.serving.modelserver.llm import converted_folder, converted_from, packaged_folder, resolve
    gguf = sorted(packaged_folder().glob("*.gguf"))[0]
    folder = converted_from(gguf)
    if folder is None:
        raise SystemExit(f"{converted_folder()} is missing or stale: run `make llm-env`")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    state, saved = model.state_dict(), load_file(str(folder / "model.safetensors"))
    messages = [{"role": "user", "content": "What is this sentence about? The match went to penalties."}]
    tokenizers = [AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name),
                  AutoTokenizer.from_pretrained(str(folder))]
    prompts = [t.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) for t in tokenizers]
    print(json.dumps({
        "served_from": str(resolve("packaged:smollm2").folder) == str(folder),
        "tensors": len(saved),
        "unsaved": sorted(set(state) - set(saved)),
        "different": sorted(k for k in saved if not torch.equal(saved[k], state[k])),
        "same_prompt": prompts[0] == prompts[1],
        "same_ids": tokenizers[0](prompts[0])["input_ids"] == tokenizers[1](prompts[0])["input_ids"],
        "eos": [t.eos_token for t in tokenizers],
    }))
""")


@pytest.mark.live
def test_the_converted_folder_holds_the_gguf_files_weights_and_tokenizer():
    if reason := llm_env_missing():
        pytest.skip(reason)
    done = subprocess.run([str(LLM_PYTHON), "-c", SAME_AS_THE_GGUF], cwd=settings.BASE_DIR, capture_output=True,
                          text=True, timeout=600, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                                                        "PYTHONPATH": str(settings.BASE_DIR)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["served_from"]
    assert found["tensors"] > 200
    assert found["unsaved"] in ([], ["lm_head.weight"])  # tied to the embeddings, which are saved
    assert found["different"] == []
    assert (found["same_prompt"], found["same_ids"]) == (True, True)
    assert found["eos"] == ["<|im_end|>", "<|im_end|>"]
