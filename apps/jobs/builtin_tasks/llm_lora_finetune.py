"""LoRA fine-tuning of a chat model on an instruction dataset (transformers + peft; nothing is downloaded).

Reads a JSONL file (rows `{"messages": [...]}` ending with the assistant's answer, or `{"prompt", "completion"}`),
holds a fraction out, measures the held-out loss and perplexity of the base model, trains a LoRA adapter on the
answers' tokens, measures again, and writes the adapter (`model/`, and the merged weights when asked), the split
(train.jsonl, heldout.jsonl), metrics.json and a model card. Tracked through the portal's MLflow API when
MLFLOW_TRACKING_URI is set: params, train_loss per optimiser step, eval loss / perplexity before and after, the
dataset's digest, the base model's SHA-256, the adapter as the run's `model` artifact; tracking.json lets the
model-register node register it with the card as the version's description.

One process per replica with the operator's env contract (WORLD_SIZE > 1: DistributedDataParallel, gloo on CPU,
nccl on GPUs); rank 0 evaluates, saves and tracks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from apps.jobs.builtin_tasks import _llm
from apps.jobs.builtin_tasks._common import (
    HttpError,
    TaskError,
    call_json,
    fail,
    flag,
    log,
    output_dir,
    parser,
    write_json,
)

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
JOIN_SECONDS = 300  # for every replica to join (loading the model comes after)
FLUSH_EVERY = 10  # optimiser steps between two uploads of the loss curve


def build_parser() -> argparse.ArgumentParser:
    p = parser("llm_lora_finetune", __doc__)
    p.add_argument(*flag("dataset"), required=True, help="a JSONL file, or a folder (dataset version) holding one")
    p.add_argument(*flag("file"), default="", help="the JSONL file inside the folder (default: its only one)")
    p.add_argument(*flag("base_model"), default=_llm.PACKAGED, help="packaged:smollm2, a folder, models:/name/3")
    p.add_argument(*flag("lora_r"), type=int, default=8, help="LoRA rank")
    p.add_argument(*flag("lora_alpha"), type=float, default=16, help="LoRA alpha (scale = alpha / r)")
    p.add_argument(*flag("lora_dropout"), type=float, default=0.05, help="dropout on the LoRA input")
    p.add_argument(*flag("target_modules"), default="q_proj,v_proj", help="comma-separated, or all-linear")
    p.add_argument(*flag("epochs"), type=float, default=1, help="passes over the training rows (if max_steps is 0)")
    p.add_argument(*flag("max_steps"), type=int, default=0, help="optimiser steps; 0: from epochs")
    p.add_argument(*flag("learning_rate"), type=float, default=2e-4, help="AdamW learning rate")
    p.add_argument(*flag("batch_size"), type=int, default=4, help="rows per micro-batch per replica")
    p.add_argument(*flag("gradient_accumulation"), type=int, default=1, help="micro-batches per optimiser step")
    p.add_argument(*flag("max_length"), type=int, default=512, help="tokens per row (longer answers are cut)")
    p.add_argument(*flag("precision"), choices=PRECISIONS, default="auto", help="auto: bf16 on a GPU that has it")
    p.add_argument(*flag("gradient_checkpointing"), action="store_true", help="recompute activations (less memory)")
    p.add_argument(*flag("seed"), type=int, default=42, help="shuffles, split, LoRA init")
    p.add_argument(*flag("heldout_fraction"), type=float, default=0.1, help="rows held out for the eval loss")
    p.add_argument(*flag("merge"), action="store_true", help="register merged weights (the adapter is kept too)")
    return p


def check_args(args: argparse.Namespace) -> None:
    positive = ("lora_r", "batch_size", "gradient_accumulation", "max_length")
    for name in positive:
        if getattr(args, name) < 1:
            raise TaskError(f"--{name} must be at least 1")
    if args.max_steps < 0 or (args.epochs <= 0 and args.max_steps == 0):
        raise TaskError("give epochs above 0, or max_steps of at least 1")
    if args.learning_rate <= 0 or args.lora_alpha <= 0:
        raise TaskError("--learning_rate and --lora_alpha must be greater than 0")
    if not 0 <= args.lora_dropout < 1 or not 0 <= args.heldout_fraction < 1:
        raise TaskError("--lora_dropout and --heldout_fraction must be in [0, 1)")
    modules = target_modules(args.target_modules)
    if not modules:
        raise TaskError("--target_modules: name at least one module (q_proj,v_proj) or all-linear")


def target_modules(text: str) -> list[str] | str:
    if text.strip() == "all-linear":
        return "all-linear"
    return [m for m in (part.strip() for part in text.split(",")) if m]


def distributed_env() -> tuple[int, int, int]:
    """(world size, rank, local rank); (1, 0, 0) outside a distributed job."""
    try:
        return (
            int(os.environ.get("WORLD_SIZE", "1")),
            int(os.environ.get("RANK", "0")),
            int(os.environ.get("LOCAL_RANK", "0")),
        )
    except ValueError:
        raise TaskError("WORLD_SIZE, RANK and LOCAL_RANK must be whole numbers") from None


def pick_device(precision: str, local_rank: int) -> tuple[Any, Any, str]:
    """(device, autocast dtype or None, the precision used). bf16/fp16 need a GPU that has them: else a clear error."""
    import torch

    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    bf16 = cuda and torch.cuda.is_bf16_supported()
    if precision == "auto":
        precision = "bf16" if bf16 else "fp16" if cuda else "fp32"
    if precision == "bf16" and not bf16:
        where = "this GPU does not support bfloat16" if cuda else "this task has no GPU (CPU training is fp32)"
        raise TaskError(f"--precision bf16: {where}; use fp32 or auto")
    if precision == "fp16" and not cuda:
        raise TaskError("--precision fp16: this task has no GPU (CPU training is fp32); use fp32 or auto")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return device, dtype, precision


def dataset_label(folder: Path) -> tuple[str, str]:
    """(the version's digest when the portal gave its materialised folder, its ref name@N when the API says)."""
    digest = next((part for part in reversed(folder.parts) if re.fullmatch(r"[0-9a-f]{64}", part)), "")
    if not digest:
        return "", ""
    url, token, project = (os.environ.get(k, "") for k in ("PORTAL_API_URL", "PORTAL_API_TOKEN", "PORTAL_PROJECT"))
    if not (url and token and project):
        return digest, ""
    import urllib.parse

    query = urllib.parse.urlencode({"project": project, "digest": digest})
    try:
        found = call_json("GET", f"{url.rstrip('/')}/dataset-versions/?{query}", token=token, timeout=10)
        found = found.get("results", [])
    except (HttpError, ValueError, AttributeError):
        return digest, ""
    return digest, (found[0].get("ref") or "") if found else ""


class Tracker:
    """The tracking run (rank 0, when MLFLOW_TRACKING_URI is set); a tracking failure is a warning."""

    def __init__(self) -> None:
        self.client: Any = None
        self.info: dict[str, Any] = {}
        self.pending: dict[int, float] = {}
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            log("tracking skipped: MLFLOW_TRACKING_URI is not set")
            return
        from apps.jobs.builtin_tasks._tracking import Tracking

        self.experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or os.environ.get("PORTAL_PIPELINE") or "Default"
        parts = [os.environ.get(k) for k in ("PORTAL_PIPELINE", "PORTAL_RUN_ID", "PORTAL_TASK")]
        self.client = Tracking()
        self.info = self.client.start_run(
            self.experiment, "-".join(filter(None, parts)) or None, {"portal.task": os.environ.get("PORTAL_TASK", "")}
        )
        log(f"tracking as run {self.info['run_id']} in experiment {self.experiment!r}")

    def log(self, **kwargs: Any) -> None:
        if self.client is not None:
            self.client.log_batch(self.info["run_id"], **kwargs)

    def step(self, step: int, loss: float) -> None:
        self.pending[step] = loss
        if len(self.pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.pending and self.client is not None:
            self.client.log_batch(self.info["run_id"], history={"train_loss": dict(self.pending)})
        self.pending = {}


def card(base: _llm.BaseModel, data: dict[str, Any], method: dict[str, Any], results: dict[str, float]) -> str:
    """The model card: README.md beside the weights, and the registered version's description."""
    dataset = data["ref"] or (f"version {data['digest'][:12]}" if data["digest"] else data["file"])
    targets = method["target_modules"]
    targets = targets if isinstance(targets, str) else ", ".join(targets)
    return (
        f"# LoRA fine-tune of {base.name}\n\n"
        f"- **Base model**: {base.name} ({base.reference}), SHA-256 {base.digest}\n"
        f"- **Data**: {dataset} ({data['file']}), {data['train_rows']} training rows, "
        f"{data['heldout_rows']} held out" + (f"; dataset digest {data['digest']}" if data["digest"] else "") + "\n"
        f"- **Method**: LoRA r={method['lora_r']}, alpha={method['lora_alpha']:g}, dropout={method['lora_dropout']:g} "
        f"on {targets}; {method['steps']} optimiser steps of {method['rows_per_step']} rows, AdamW lr "
        f"{method['learning_rate']:g}, {method['precision']} on {method['device']} × {method['world_size']}, "
        f"seed {method['seed']}; loss on the answers' tokens only\n"
        f"- **Held-out loss**: {results['eval_loss_before']:.4f} → {results['eval_loss_after']:.4f} (perplexity "
        f"{results['eval_perplexity_before']:.2f} → {results['eval_perplexity_after']:.2f})\n"
        f"- **Form**: {'merged weights (Hugging Face folder)' if method['merged'] else 'PEFT adapter'}; serve it "
        "with an inference service of framework `llm` (docs/llm.md)\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    world, rank, _local = 1, 0, 0
    try:
        check_args(args)
        world, rank, local_rank = distributed_env()
        source = _llm.find_jsonl(Path(args.dataset), args.file.strip())
        examples = _llm.read_examples(source)
        train_rows, heldout = _llm.split(examples, args.heldout_fraction, args.seed)
        log(f"read {len(examples)} rows from {source.name}: {len(train_rows)} to train on, {len(heldout)} held out")
        return finetune(args, source, train_rows, heldout, world, rank, local_rank)
    except TaskError as exc:
        return fail(f"rank {rank}: {exc}" if world > 1 else str(exc), exc.code)


def finetune(
    args: argparse.Namespace,
    source: Path,
    train_rows: list[_llm.Example],
    heldout: list[_llm.Example],
    world: int,
    rank: int,
    local_rank: int,
) -> int:
    _llm.offline()
    try:
        import torch
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise TaskError(f"{exc.name} is not installed in this task environment (make llm-env)", code=1) from None
    device, amp_dtype, precision = pick_device(args.precision, local_rank)
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = output_dir()
    if world > 1:
        import torch.distributed as dist

        backend = "nccl" if device.type == "cuda" else "gloo"
        log(f"rank {rank}/{world}: joining {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} ({backend})")
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=JOIN_SECONDS))
    lead = rank == 0
    tracker = Tracker() if lead else None
    try:
        base = _llm.resolve_base(args.base_model, out / "base")
        started = time.perf_counter()
        model, tokenizer = _llm.load(base)
        log(f"loaded {base.name} (sha256 {base.digest[:12]}) in {time.perf_counter() - started:.1f} s on {device}")
        encoded_train = [_llm.encode(tokenizer, e, args.max_length) for e in train_rows]
        encoded_eval = [_llm.encode(tokenizer, e, args.max_length) for e in heldout]
        model.to(device)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
        pad = tokenizer.pad_token_id
        before = _llm.eval_loss(model, encoded_eval, pad, device, args.batch_size) if lead else float("nan")
        if lead and heldout:
            log(f"held-out loss before: {before:.4f} (perplexity {_llm.perplexity(before):.2f})")
        config = LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=target_modules(args.target_modules),
            task_type="CAUSAL_LM",
        )
        try:
            model = get_peft_model(model, config)
        except ValueError as exc:
            raise TaskError(f"--target_modules: {exc}") from None
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        log(f"LoRA: {trainable:,} trainable parameters of {total:,} ({100 * trainable / total:.2f} %)")
        rows_per_step = args.batch_size * args.gradient_accumulation * world
        steps = args.max_steps or max(1, round(args.epochs * len(encoded_train) / rows_per_step))
        data: dict[str, Any] = {"file": source.name, "train_rows": len(train_rows), "heldout_rows": len(heldout)}
        data["digest"], data["ref"] = dataset_label(source.parent if source.is_file() else source)
        method = {
            "lora_r": args.lora_r, "lora_alpha": args.lora_alpha, "lora_dropout": args.lora_dropout,
            "target_modules": target_modules(args.target_modules), "steps": steps, "rows_per_step": rows_per_step,
            "learning_rate": args.learning_rate, "precision": precision, "device": device.type, "world_size": world,
            "seed": args.seed, "merged": args.merge,
        }  # fmt: skip
        if tracker is not None:
            tracker.log(
                params={
                    **{k: v for k, v in vars(args).items() if k != "dataset"},
                    "base_model": base.name,
                    "base_model_ref": base.reference,
                    "base_model_sha256": base.digest,
                    "dataset_file": source.name,
                    "dataset_digest": data["digest"],
                    "dataset_version": data["ref"],
                    "train_rows": len(train_rows),
                    "heldout_rows": len(heldout),
                    "steps": steps,
                    "trainable_parameters": trainable,
                    "device": device.type,
                    "precision_used": precision,
                    "world_size": world,
                    "method": "lora",
                },
                metrics={"eval_loss_before": before, "eval_perplexity_before": _llm.perplexity(before)}
                if heldout
                else None,
            )
        losses, seconds, cpu_seconds = train(
            args, model, encoded_train, pad, device, amp_dtype, steps, world, rank, tracker
        )
        if tracker is not None:
            tracker.flush()
        if world > 1:
            import torch.distributed as dist

            dist.barrier()
        if not lead:
            return 0
        trained = model
        after = _llm.eval_loss(trained, encoded_eval, pad, device, args.batch_size)
        results = {
            "eval_loss_before": before, "eval_loss_after": after, "eval_perplexity_before": _llm.perplexity(before),
            "eval_perplexity_after": _llm.perplexity(after), "train_loss_first": losses[0],
            "train_loss_last": losses[-1], "seconds_per_step": seconds / steps,
            "cpu_seconds_per_step": cpu_seconds / steps,
        }  # fmt: skip
        if heldout:
            log(f"held-out loss after: {after:.4f} (perplexity {_llm.perplexity(after):.2f})")
        save(out, trained, tokenizer, base, data, method, results, train_rows, heldout, tracker)
    except BaseException:
        if tracker is not None and tracker.client is not None:
            with contextlib.suppress(TaskError):
                tracker.client.end_run(tracker.info["run_id"], "FAILED")
        raise
    finally:
        if world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    return 0


def train(
    args: argparse.Namespace,
    model: Any,
    encoded: list[tuple[list[int], list[int]]],
    pad: int,
    device: Any,
    amp_dtype: Any,
    steps: int,
    world: int,
    rank: int,
    tracker: Tracker | None,
) -> tuple[list[float], float, float]:
    """`steps` AdamW steps over seeded shuffles of the rows (each replica its share); (loss per step, wall seconds,
    CPU seconds of this process: on a shared machine the wall clock says more about the neighbours)."""
    import torch

    if world > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    order: list[int] = []
    epoch = 0
    model.train()
    losses: list[float] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        optimiser.zero_grad(set_to_none=True)
        step_loss = torch.zeros(2, device=device)  # (sum of token losses, tokens) over the step's micro-batches
        for _micro in range(args.gradient_accumulation):
            if len(order) < args.batch_size * world:
                shuffled = list(range(len(encoded)))
                random.Random(args.seed + epoch).shuffle(shuffled)
                order += shuffled * max(1, -(-args.batch_size * world // len(shuffled)))
                epoch += 1
            taken, order = order[: args.batch_size * world], order[args.batch_size * world :]
            rows = [encoded[i] for i in taken[rank::world]]
            batch = _llm.batch_tensors(rows, pad, device)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                total, tokens = _llm.token_loss(model, batch)
            loss = total / max(tokens, 1) / args.gradient_accumulation
            (scaler.scale(loss) if scaler else loss).backward()
            step_loss += torch.tensor([float(total.detach()), tokens], device=device)
        if scaler:
            scaler.step(optimiser)
            scaler.update()
        else:
            optimiser.step()
        if world > 1:
            dist.all_reduce(step_loss)
        value = float(step_loss[0] / step_loss[1].clamp(min=1))
        losses.append(value)
        if tracker is not None:
            tracker.step(step, value)
        if rank == 0 and (step == 1 or step == steps or step % max(1, steps // 20) == 0):
            log(f"step {step}/{steps}: loss {value:.4f} ({(time.perf_counter() - started) / step:.2f} s/step)")
    cpu = time.process_time() - cpu_started
    if rank == 0:
        log(
            f"trained {steps} steps: {(time.perf_counter() - started) / steps:.2f} s/step, {cpu / steps:.2f} CPU s/step"
        )
    return losses, time.perf_counter() - started, cpu


def save(
    out: Path,
    model: Any,
    tokenizer: Any,
    base: _llm.BaseModel,
    data: dict[str, Any],
    method: dict[str, Any],
    results: dict[str, float],
    train_rows: list[_llm.Example],
    heldout: list[_llm.Example],
    tracker: Tracker | None,
) -> None:
    """model/ (what gets registered: the adapter, or merged weights with the adapter in adapter/), the split, the card,
    metrics.json; uploaded to the tracking run, and tracking.json for the register node."""
    import shutil

    text = card(base, data, method, results)
    adapter = out / ("adapter" if method["merged"] else "model")
    for folder in (out / "model", out / "adapter"):
        shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(str(adapter))
    (adapter / "README.md").write_text(text, encoding="utf-8")
    if method["merged"]:
        merged = model.merge_and_unload()
        dequantised(merged)
        merged.save_pretrained(str(out / "model"))
        tokenizer.save_pretrained(str(out / "model"))
        (out / "model" / "README.md").write_text(text, encoding="utf-8")
    _llm.write_jsonl(out / "train.jsonl", train_rows)
    _llm.write_jsonl(out / "heldout.jsonl", heldout)
    metrics = {**results, "base_model": base.name, "base_model_ref": base.reference, "base_model_sha256": base.digest}
    write_json(out / "metrics.json", metrics)
    (out / "MODEL_CARD.md").write_text(text, encoding="utf-8")
    log(f"wrote {out / 'model'} ({'merged weights' if method['merged'] else 'LoRA adapter'}) and the card")
    if tracker is None or tracker.client is None:
        return
    finite = {k: v for k, v in results.items() if v == v}
    tracker.log(metrics=finite)
    tracker.client.upload(tracker.info["artifact_uri"], out / "model", "model")
    if method["merged"]:
        tracker.client.upload(tracker.info["artifact_uri"], adapter, "adapter")
    tracker.client.upload(tracker.info["artifact_uri"], out / "metrics.json", "metrics.json")
    tracker.client.end_run(tracker.info["run_id"])
    from apps.jobs.builtin_tasks._tracking import tracked_model

    write_json(out / "tracking.json", tracked_model(tracker.info, tracker.experiment, description=text))
    what = "merged weights" if method["merged"] else "adapter"
    log(f"tracked: params, train_loss per step, held-out loss before/after, the {what}")


def dequantised(model: Any) -> None:
    """A model loaded from GGUF holds float32 weights (transformers dequantises them) but keeps the GGUF quantiser,
    which refuses save_pretrained: drop it, so the merged weights save as an ordinary Hugging Face folder."""
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def exit_now(code: int) -> None:
    """End without interpreter finalisation after a distributed run (pytorch_ddp_train.exit_now says why)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
