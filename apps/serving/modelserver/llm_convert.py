"""The packaged chat model converted once into a Hugging Face folder, so that loading it is reading safetensors.

Loading the packaged GGUF file with transformers parses the file three times (tokenizer, config, weights; its
49,152-token vocabulary field by field each time) and dequantises every tensor: 25 s of CPU on an idle machine, and
every fine-tune, evaluation and replica paid it again (docs/serving-llm.md, "Load time"). `make llm-env` runs
`python -m apps.serving.modelserver.llm_convert` once: the same float32 weights, tokenizer, chat template and
generation config, saved under the environment's prefix (`<venv>/share/portal-llm/SmolLM2-135M-Instruct/`), with
`source.json` naming the GGUF file it came from (name, size, SHA-256). `llm.resolve` (the model server) and
`builtin_tasks._llm.resolve_base` (the fine-tune and the evaluation; they may not import this package, so they
repeat the check in a few lines) use the folder when its source still matches the packaged file, else the GGUF file.

Nothing here imports torch or transformers at module level (as llm.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from apps.serving.modelserver.llm import LoadError, converted_folder, packaged_folder

SOURCE = "source.json"


def packaged_gguf() -> Path:
    folder = packaged_folder()
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise LoadError(f"no .gguf file in {folder}")
    return files[0]


def source_of(gguf: Path) -> dict[str, object]:
    digest = hashlib.sha256()
    with gguf.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "sha256": digest.hexdigest()}


def convert(dest: Path | None = None) -> Path:
    """Write the converted folder (into a temporary sibling, renamed into place: a reader never sees half of it)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    dest = dest or converted_folder()
    gguf = packaged_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are float32 already; the GGUF quantiser transformers keeps on the model refuses save_pretrained.
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    (partial / SOURCE).write_text(json.dumps(source_of(gguf), indent=2) + "\n", encoding="utf-8")
    for path in partial.iterdir():
        path.chmod(0o644)  # safetensors writes 0600: the environment's other users (a task's sandbox) read it too
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return dest


def main() -> int:
    try:
        gguf = packaged_gguf()
    except LoadError as exc:
        print(f"llm_convert: {exc}", file=sys.stderr)
        return 1
    dest = converted_folder()
    try:
        if json.loads((dest / SOURCE).read_text()) == source_of(gguf):
            print(f"{dest} is up to date")
            return 0
    except (OSError, ValueError):
        pass
    print(f"converting {gguf} into {dest}")
    convert(dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
