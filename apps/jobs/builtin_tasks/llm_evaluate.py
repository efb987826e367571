"""Evaluate a fine-tuned chat model against its base on held-out prompts: perplexity and exact match, side by side.

The prompts are a JSONL file of the fine-tuning's formats (default: the upstream fine-tune's heldout.jsonl); the
tuned model is a PEFT adapter or merged weights (default: the upstream fine-tune's model/), the base the one it was
trained from (its metrics.json) unless given. For each model: the mean loss and perplexity of the reference
answers, the share of greedy answers equal to the reference (whitespace collapsed) and, with --format_regex, the
share that match the format. Tracked as two runs of the experiment, `base` and `tuned`, with the same metric keys,
so the experiment's run comparison shows them in one table; comparison.json and the log have the table too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks import _llm
from apps.jobs.builtin_tasks._common import (
    TaskError,
    fail,
    flag,
    input_dirs,
    log,
    output_dir,
    parser,
    resolve_input,
    write_json,
)

METRICS = ("eval_loss", "eval_perplexity", "exact_match", "format_match")


def build_parser() -> argparse.ArgumentParser:
    p = parser("llm_evaluate", __doc__)
    p.add_argument(*flag("prompts"), default="", help="JSONL file or folder (default: the upstream heldout.jsonl)")
    p.add_argument(*flag("file"), default="", help="the JSONL file inside the prompts folder")
    p.add_argument(*flag("model"), default="", help="the tuned model folder (default: the upstream model/)")
    p.add_argument(*flag("base_model"), default="", help="default: what the fine-tune recorded, else packaged")
    p.add_argument(*flag("max_new_tokens"), type=int, default=32, help="tokens per greedy answer")
    p.add_argument(*flag("max_prompts"), type=int, default=50, help="evaluate at most this many prompts")
    p.add_argument(*flag("format_regex"), default="", help="an answer follows the format when this matches it all")
    p.add_argument(*flag("min_exact_match"), type=float, default=0.0, help="fail below this tuned exact match")
    p.add_argument(*flag("min_format_match"), type=float, default=0.0, help="fail below this tuned format match")
    return p


def normalise(text: str) -> str:
    return " ".join(text.split())


def upstream_with(name: str) -> Path | None:
    found = [d for d in input_dirs().values() if (d / name).exists()]
    return found[0] if len(found) == 1 else None


def score(
    model: Any, tokenizer: Any, examples: list[_llm.Example], args: argparse.Namespace, pattern: Any, device: Any
) -> tuple[dict[str, float], list[str]]:
    encoded = [_llm.encode(tokenizer, e, 2048) for e in examples]
    loss = _llm.eval_loss(model, encoded, tokenizer.pad_token_id, device, 4)
    answers = [_llm.generate(model, tokenizer, e.prompt, args.max_new_tokens, device) for e in examples]
    exact = sum(normalise(a) == normalise(e.completion) for a, e in zip(answers, examples, strict=True))
    metrics = {"eval_loss": loss, "eval_perplexity": _llm.perplexity(loss), "exact_match": exact / len(examples)}
    if pattern is not None:
        metrics["format_match"] = sum(bool(pattern.fullmatch(a.strip())) for a in answers) / len(examples)
    return metrics, answers


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.max_new_tokens < 1 or args.max_prompts < 1:
            raise TaskError("--max_new_tokens and --max_prompts must be at least 1")
        try:
            pattern = re.compile(args.format_regex, re.DOTALL) if args.format_regex else None
        except re.error as exc:
            raise TaskError(f"--format_regex: {exc}") from None
        prompts = Path(args.prompts) if args.prompts else resolve_input(None, "heldout.jsonl", "prompts")
        examples = _llm.read_examples(_llm.find_jsonl(prompts, args.file.strip()))[: args.max_prompts]
        tuned_dir = Path(args.model) if args.model else (upstream_with("model") or Path()) / "model"
        if not tuned_dir.is_dir():
            raise TaskError("--model: give the tuned model's folder (no upstream output has model/)")
        recorded = tuned_dir.parent / "metrics.json"
        reference = args.base_model
        if not reference and recorded.is_file():
            reference = json.loads(recorded.read_text()).get("base_model_ref", "")
        out = output_dir()
        base = _llm.resolve_base(reference, out / "base")
        return evaluate(args, examples, base, tuned_dir, pattern, out)
    except TaskError as exc:
        return fail(str(exc), exc.code)


def evaluate(
    args: argparse.Namespace,
    examples: list[_llm.Example],
    base: _llm.BaseModel,
    tuned_dir: Path,
    pattern: Any,
    out: Path,
) -> int:
    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    results: dict[str, dict[str, float]] = {}
    samples: dict[str, list[str]] = {}
    model: Any = None
    for label in ("base", "tuned"):
        started = time.perf_counter()
        if label == "base":
            model, tokenizer = _llm.load(base)
        elif (tuned_dir / "adapter_config.json").is_file():
            # The adapter merged into the base already loaded: loading the base again (dequantising a GGUF file)
            # would cost as much as the rest of the evaluation.
            model = _llm.with_adapter(model, tuned_dir)
        else:
            model = None  # freed before the other model loads
            model, tokenizer = _llm.load(_llm.BaseModel(tuned_dir, "", tuned_dir.name, "", str(tuned_dir)))
        model.to(device).eval()
        results[label], samples[label] = score(model, tokenizer, examples, args, pattern, device)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in results[label].items())
        log(f"{label}: {shown} ({len(examples)} prompts, {time.perf_counter() - started:.1f} s)")
    del model
    rows = [k for k in METRICS if k in results["base"]]
    table = ["| metric | base | tuned |", "|---|---|---|"]
    table += [f"| {k} | {results['base'][k]:.4f} | {results['tuned'][k]:.4f} |" for k in rows]
    log("\n".join(table))
    examples_out = [
        {"prompt": e.prompt[-1]["content"], "reference": e.completion, "base": b, "tuned": t}
        for e, b, t in zip(examples, samples["base"], samples["tuned"], strict=True)
    ]
    write_json(out / "comparison.json", {"metrics": results, "answers": examples_out, "base_model": base.reference})
    track(results, base, tuned_dir)
    tuned = results["tuned"]
    if tuned["exact_match"] < args.min_exact_match:
        return fail(f"tuned exact match {tuned['exact_match']:.4f} is below the minimum {args.min_exact_match}", 1)
    if pattern is not None and tuned["format_match"] < args.min_format_match:
        return fail(f"tuned format match {tuned['format_match']:.4f} is below the minimum {args.min_format_match}", 1)
    return 0


def track(results: dict[str, dict[str, float]], base: _llm.BaseModel, tuned_dir: Path) -> None:
    """Two runs with the same metric keys (base, tuned): the run comparison's one table."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        log("tracking skipped: MLFLOW_TRACKING_URI is not set")
        return
    from apps.jobs.builtin_tasks._tracking import Tracking, TrackingError

    experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
    prefix = "-".join(filter(None, [os.environ.get(k) for k in ("PORTAL_PIPELINE", "PORTAL_RUN_ID", "PORTAL_TASK")]))
    training = {}
    if (tuned_dir.parent / "tracking.json").is_file():
        training = json.loads((tuned_dir.parent / "tracking.json").read_text())
    try:
        tracking = Tracking()
        ids = {}
        for label, metrics in results.items():
            tags = {"portal.task": os.environ.get("PORTAL_TASK", ""), "portal.evaluation": label}
            info = tracking.start_run(experiment, f"{prefix}-{label}" if prefix else label, tags)
            params = {"model": label, "base_model": base.reference, "base_model_sha256": base.digest}
            if label == "tuned":
                params["tuned_model"] = training.get("model_uri") or str(tuned_dir)
            tracking.log_batch(info["run_id"], params=params, metrics={k: v for k, v in metrics.items() if v == v})
            tracking.end_run(info["run_id"])
            ids[label] = info["run_id"]
        if training.get("run_id"):  # the training run gets the tuned scores too, beside its eval loss
            tuned = {f"heldout_{k}": v for k, v in results["tuned"].items() if v == v and k != "eval_loss"}
            tracking.log_batch(training["run_id"], metrics=tuned)
    except TrackingError as exc:
        log(f"warning: tracking failed: {exc}")
        return
    log(f"tracked as runs {ids['base']} (base) and {ids['tuned']} (tuned): compare them in the experiment")


if __name__ == "__main__":
    raise SystemExit(main())
