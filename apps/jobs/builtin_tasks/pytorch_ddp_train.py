"""A small DistributedDataParallel training loop on synthetic data (gloo on CPU by default).

Run as one process per replica with the operator's env contract (MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK, LOCAL_RANK), e.g. by the portal's runtime or `torchrun`. Rank 0 writes model.pt and metrics.json.

The node's distributed strategy (PORTAL_STRATEGY, docs/distributed.md) is applied: ddp wraps the model in
DistributedDataParallel, fsdp in FullyShardedDataParallel (on CPU with gloo too); precision bf16/fp16 runs the
forward pass under torch.autocast (fp16 with a gradient scaler, on GPUs); gradient_accumulation steps the optimizer
every N micro-batches (gradients synchronised on the last one only); gradient_checkpointing recomputes the
activations in the backward pass (torch.utils.checkpoint). deepspeed, horovod and tensor or pipeline parallelism
need their own training code: this demo refuses them, saying so. metrics.json records what was applied.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

from apps.jobs.builtin_tasks._common import fail, flag, log, output_dir, parser, write_json

REQUIRED_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def build_parser() -> argparse.ArgumentParser:
    p = parser("pytorch_ddp_train", __doc__)
    p.add_argument(*flag("epochs"), type=int, default=5, help="passes over the data")
    p.add_argument(*flag("batch_size"), type=int, default=32, help="batch size per process")
    p.add_argument(*flag("lr"), type=float, default=0.05, help="SGD learning rate")
    p.add_argument(*flag("samples"), type=int, default=1024, help="synthetic rows (shared out between ranks)")
    p.add_argument(*flag("features"), type=int, default=8, help="synthetic feature count")
    p.add_argument(*flag("seed"), type=int, default=0, help="random seed (the same data on every rank)")
    p.add_argument(*flag("backend"), choices=("gloo", "nccl"), default="gloo", help="nccl needs one GPU per rank")
    p.add_argument(*flag("init_timeout"), type=int, default=120, help="seconds to wait for all ranks to join")
    p.add_argument(*flag("hidden"), type=int, default=0, help="hidden units (0: a linear model)")
    return p


DEFAULT_STRATEGY = {
    "type": "ddp", "precision": "fp32", "gradient_accumulation": 1, "gradient_checkpointing": False,
    "tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": None,
}  # fmt: skip


def read_strategy() -> dict[str, Any] | str:
    """The strategy the portal rendered (PORTAL_STRATEGY), or plain DDP in fp32 without one; a string says why this
    script cannot apply it."""
    raw = os.environ.get("PORTAL_STRATEGY")
    try:
        strategy = {**DEFAULT_STRATEGY, **(json.loads(raw) if raw else {})}
    except ValueError:
        return "PORTAL_STRATEGY is not JSON"
    if strategy["type"] not in ("ddp", "fsdp"):
        return (
            f"strategy {strategy['type']}: this demo trains with ddp or fsdp only; "
            f"{strategy['type']} needs a training script written for it (and its package in the task environment)"
        )
    if strategy["tensor_parallel"] != 1 or strategy["pipeline_parallel"] != 1:
        return "tensor and pipeline parallelism need a model written for them: this demo splits the data only"
    if strategy["precision"] not in ("fp32", "fp16", "bf16"):
        return f"precision {strategy['precision']!r} is not fp32, fp16 or bf16"
    return strategy


def check_env() -> tuple[int, int, int] | str:
    """(world size, rank, local rank), or why the env contract is not met."""
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        return (
            f"{', '.join(missing)} not set: run this as a distributed job (kind distributed, framework pytorch) "
            "or under torchrun"
        )
    try:
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        int(os.environ["MASTER_PORT"])
    except ValueError:
        return "WORLD_SIZE, RANK, LOCAL_RANK and MASTER_PORT must be whole numbers"
    if world < 1 or not 0 <= rank < world:
        return f"RANK must be in [0, WORLD_SIZE); got RANK={rank}, WORLD_SIZE={world}"
    return world, rank, local_rank


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("epochs", "batch_size", "samples", "features", "init_timeout"):
        if getattr(args, name) < 1:
            return fail(f"--{name} must be at least 1")
    if args.lr <= 0:
        return fail("--lr must be greater than 0")
    env = check_env()
    if isinstance(env, str):
        return fail(env)
    world, rank, local_rank = env
    strategy = read_strategy()
    if isinstance(strategy, str):
        return fail(strategy)
    if args.hidden < 0:
        return fail("--hidden must be 0 or more")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return fail(
            f"PyTorch is not installed in this task environment ({exc}); "
            "install requirements-train.txt (torch==2.13.0) into it",
            2,
        )
    if args.backend == "nccl" and not torch.cuda.is_available():
        return fail("--backend nccl needs a GPU; use gloo on CPU", 2)
    if strategy["precision"] == "fp16" and args.backend != "nccl":
        return fail("precision fp16 needs a GPU (nccl); on CPU use bf16 or fp32", 2)
    if strategy["precision"] == "bf16" and args.backend == "nccl" and not torch.cuda.is_bf16_supported():
        return fail(f"precision bf16: {torch.cuda.get_device_name()} has no bf16; use fp16 or fp32", 2)

    device = torch.device(f"cuda:{local_rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    log(f"rank {rank}/{world} (local {local_rank}): joining {addr}:{port} with {args.backend} on {device}")
    dist.init_process_group(backend=args.backend, init_method="env://", timeout=timedelta(seconds=args.init_timeout))
    try:
        metrics = train(args, rank, world, device, strategy)
        if rank == 0:
            out = output_dir()
            torch.save(metrics.pop("state_dict"), out / "model.pt")
            write_json(out / "metrics.json", metrics)
            log(f"rank 0 wrote {out / 'model.pt'} and {out / 'metrics.json'}")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def build_model(args: argparse.Namespace, device: Any, strategy: dict[str, Any]) -> tuple[Any, Any]:
    """(the wrapped model, the plain module whose state is saved): DDP or FSDP around a linear model or an MLP."""
    import torch

    if args.hidden:
        layers = [torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)]
        module = torch.nn.Sequential(*layers).to(device)
    else:
        module = torch.nn.Linear(args.features, 1).to(device)
    net = checkpointed(module) if strategy["gradient_checkpointing"] else module
    if strategy["type"] == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(net, device_id=device), module
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(net), module


def _checkpointed_class() -> type:
    import torch
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(torch.nn.Module):
        """The inner model with its activations recomputed in the backward pass instead of kept."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return checkpoint(self.inner, x, use_reentrant=False)

    return Checkpointed


def checkpointed(inner: Any) -> Any:
    """`inner` wrapped so that its activations are recomputed in the backward pass (torch is imported late)."""
    return _checkpointed_class()(inner)


def autocast_of(device: Any, precision: str) -> tuple[Any, str]:
    """(a context manager for the forward pass, the dtype it computes in)."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext(), "float32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype), str(dtype).removeprefix("torch.")


def state_of(model: Any, module: Any, strategy: dict[str, Any]) -> dict[str, Any]:
    """The full (unsharded) weights, gathered on every rank under FSDP."""
    if strategy["type"] == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(model, writeback=False):
            return {key: value.detach().cpu().clone() for key, value in module.state_dict().items()}
    return {key: value.cpu() for key, value in module.state_dict().items()}


def train(
    args: argparse.Namespace, rank: int, world: int, device: Any, strategy: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Fit y = Xw + b + noise; every rank holds the same data and trains its shard, as the strategy says."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    strategy = {**DEFAULT_STRATEGY, **(strategy or {})}
    accumulation = int(strategy["gradient_accumulation"])
    checkpointing = bool(strategy["gradient_checkpointing"])

    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=generator)
    true_w = torch.randn(args.features, 1, generator=generator)
    y = x @ true_w + 0.5 + 0.01 * torch.randn(args.samples, 1, generator=generator)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model, module = build_model(args, device, strategy)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=strategy["precision"] == "fp16")
    autocast, compute_dtype = autocast_of(device, strategy["precision"])
    loss_fn = torch.nn.MSELoss()
    if rank == 0:
        log(
            f"strategy {strategy['type']}: precision {strategy['precision']} (forward in {compute_dtype}), "
            f"gradient accumulation {accumulation}, gradient checkpointing {'on' if checkpointing else 'off'}"
        )
    started = time.monotonic()
    loss_avg = float("nan")
    steps = micro_batches = 0
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)  # (sum of losses × rows, rows)
        batches = len(loader)
        optimizer.zero_grad()
        for index, (xb, yb) in enumerate(loader, start=1):
            xb, yb = xb.to(device), yb.to(device)
            # Gradients are synchronised on the micro-batch that steps (the last of each group, or of the epoch).
            stepping = index % accumulation == 0 or index == batches
            sync = contextlib.nullcontext() if stepping else model.no_sync()
            with sync:
                with autocast:
                    loss = loss_fn(model(xb).float(), yb)
                scaler.scale(loss / accumulation).backward()
            micro_batches += 1
            if stepping:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                steps += 1
            total += torch.tensor([loss.item() * len(xb), len(xb)], device=device)
        dist.all_reduce(total)
        loss_avg = (total[0] / total[1]).item()
        if rank == 0:
            log(f"epoch {epoch}/{args.epochs}: loss {loss_avg:.6f} ({int(total[1].item())} rows on {world} ranks)")
    return {
        "state_dict": state_of(model, module, strategy),
        "final_loss": loss_avg,
        "strategy": {key: strategy[key] for key in DEFAULT_STRATEGY},
        "compute_dtype": compute_dtype,
        "micro_batches": micro_batches,
        "optimizer_steps": steps,
        "epochs": args.epochs,
        "world_size": world,
        "backend": args.backend,
        "samples": args.samples,
        "rows_per_rank": len(sampler),
        "seconds": round(time.monotonic() - started, 3),
        "torch_version": torch.__version__,
    }


def exit_now(code: int) -> None:
    """End the process without finalizing the interpreter (what a run of the script does once `main` returned).

    destroy_process_group() does not end gloo's threads: references that DistributedDataParallel leaves to the
    process group keep it (and its worker threads) alive to the end. A worker thread that releases the last
    collective's tensors while the interpreter finalizes needs the GIL, and Python ends such a thread with
    pthread_exit, whose unwinding through a noexcept frame aborts the process: "terminate called without an
    active exception", SIGABRT, exit code 134, after the rank trained well (rank 1, which has nothing to write,
    reaches its exit soonest; a CPU-bound neighbour widens the window: 3 runs of 32, then 1 of 80, failed so).
    Everything is written and flushed by now; nothing else needs the interpreter's finalization."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
