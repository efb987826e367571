"""A LoRA adapter served by the `llm` runtime on top of the packaged model, as issue 22's fine-tuning will register
it: `peft` saves an adapter of SmolLM2-135M-Instruct (its LoRA matrices set, so that it changes the answers), the
model server is given the adapter folder alone, finds its base from the adapter's config, and answers with the
adapted model."""

from __future__ import annotations

import json
import subprocess
import textwrap

import httpx
import pytest
from django.conf import settings

from tests.serving import llm as llm_fixtures
from tests.serving.llm import LLM_PYTHON, LLMServer

pytestmark = pytest.mark.live
llm_server = llm_fixtures.llm_server

MAKE_ADAPTER = textwrap.dedent("""
    import sys, torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from apps.serving.modelserver.llm import resolve
    spec = resolve("packaged:smollm2")  # the converted folder `make llm-env` writes, else the package's GGUF file
    gguf = {"gguf_file": spec.gguf_file} if spec.gguf_file else {}
    model = AutoModelForCausalLM.from_pretrained(str(spec.folder), **gguf)
    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(sys.argv[1])
""")
QUESTION = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12,
            "temperature": 0}  # fmt: skip


def test_an_adapter_folder_is_served_on_its_packaged_base(llm_server, tmp_path):
    adapter = tmp_path / "adapter"
    subprocess.run([str(LLM_PYTHON), "-c", MAKE_ADAPTER, str(adapter)], check=True, timeout=600,
                   cwd=settings.BASE_DIR, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                                               "PYTHONPATH": str(settings.BASE_DIR)})  # fmt: skip
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]

    tuned = LLMServer("tuned", "--model", str(adapter)).start()
    try:
        metadata = httpx.get(f"{tuned.url}/v2/models/tuned").json()
        answer = httpx.post(f"{tuned.url}/v1/chat/completions", json=QUESTION, timeout=120).json()
    finally:
        tuned.stop()
    base = httpx.post(f"{llm_server.url}/v1/chat/completions", json=QUESTION, timeout=120).json()

    assert metadata["parameters"]["model"] == "SmolLM2-135M-Instruct + adapter adapter"
    assert answer["choices"][0]["message"]["content"] != base["choices"][0]["message"]["content"]
    assert answer["usage"]["prompt_tokens"] == base["usage"]["prompt_tokens"]  # the same tokenizer and template


def test_a_folder_without_a_model_fails_to_start_saying_why(tmp_path):
    if reason := llm_fixtures.llm_env_missing():
        pytest.skip(reason)
    command = [str(LLM_PYTHON), "-m", "apps.serving.modelserver", "--runtime", "llm", "--name", "x",
               "--model", str(tmp_path), "--port", "0"]  # fmt: skip
    result = subprocess.run(command, cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(settings.BASE_DIR), "PATH": "/usr/bin:/bin"})  # fmt: skip

    assert result.returncode == 3
    assert "holds no model: no config.json" in result.stderr
