"""A small DistributedDataParallel training loop on synthetic data (gloo on CPU by default).

Run as one process per replica with the operator's env contract (MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK, LOCAL_RANK), e.g. by the portal's runtime or `torchrun`. Rank 0 writes model.pt and metrics.json.
"""

from __future__ import annotations

import argparse
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
    return p


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

    device = torch.device(f"cuda:{local_rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    log(f"rank {rank}/{world} (local {local_rank}): joining {addr}:{port} with {args.backend} on {device}")
    dist.init_process_group(backend=args.backend, init_method="env://", timeout=timedelta(seconds=args.init_timeout))
    try:
        metrics = train(args, rank, world, device)
        if rank == 0:
            out = output_dir()
            torch.save(metrics.pop("state_dict"), out / "model.pt")
            write_json(out / "metrics.json", metrics)
            log(f"rank 0 wrote {out / 'model.pt'} and {out / 'metrics.json'}")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def train(args: argparse.Namespace, rank: int, world: int, device: Any) -> dict[str, Any]:
    """Fit y = Xw + b + noise with a linear layer; every rank holds the same data and trains its shard."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=generator)
    true_w = torch.randn(args.features, 1, generator=generator)
    y = x @ true_w + 0.5 + 0.01 * torch.randn(args.samples, 1, generator=generator)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(torch.nn.Linear(args.features, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()
    started = time.monotonic()
    loss_avg = float("nan")
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)  # (sum of losses × rows, rows)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(xb), len(xb)], device=device)
        dist.all_reduce(total)
        loss_avg = (total[0] / total[1]).item()
        if rank == 0:
            log(f"epoch {epoch}/{args.epochs}: loss {loss_avg:.6f} ({int(total[1].item())} rows on {world} ranks)")
    return {
        "state_dict": {key: value.cpu() for key, value in model.module.state_dict().items()},
        "final_loss": loss_avg,
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
