"""Scheduling quality at cluster scale (issue #31): a generated GPU job trace replayed on a simulated cluster
(apps/runtime/simulated/) by FIFO (the baseline) and by the portal's own dispatcher in the loop under each queue
policy (apps/jobs/simulation.py, apps/jobs/queue_policy.py), under each placement strategy of the simulated cluster
(first-fit, pack, spread: apps/runtime/simulated/cluster.py), then what one dispatch pass costs as the cluster and
the queue grow. docs/scheduling.md.

    .venv/bin/python bench/scheduling.py [--small] [--gpus 64] [--jobs 2500] [--load 1.8] [--teams 8] [--seed 1]
        [--trace FILE.csv] [--policies greedy,backfill,backfill+age] [--placements first-fit,pack,spread]
        [--cost-gpus 64,512] [--cost-queued 1000,10000] [--cost-policies greedy] [--cost-only]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override;
     BENCH_DATABASE_URL=sqlite:///… for SQLite)
"""

from __future__ import annotations

import argparse
import math
import os

from _env import prepare


def fmt_s(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="a quick run: 32 GPUs, 150 jobs, small cost sizes")
    parser.add_argument("--gpus", type=int, default=64, help="GPUs of the replay's cluster (8 per node)")
    parser.add_argument("--jobs", type=int, default=2500, help="2,500 at --load 1.8: about 8.6 days of trace")
    parser.add_argument("--load", type=float, default=1.8, help="GPU time asked for / GPU time the cluster has")
    parser.add_argument("--teams", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trace", help="replay this CSV trace instead of a generated one (quotas: none)")
    parser.add_argument(
        "--policies",
        default="greedy,backfill,backfill+age",
        help="queue policies replayed (PORTAL_QUEUE_POLICY greedy or backfill; +age: backfill without fair share, "
        "PORTAL_QUEUE_FAIR_SHARE off; +borrow: with PORTAL_QUEUE_BORROWING)",
    )
    parser.add_argument(
        "--placements",
        default="first-fit",
        help="placement strategies of the simulated cluster (first-fit, pack, spread); each replay once per strategy",
    )
    parser.add_argument("--cost-gpus", default="64,512")
    parser.add_argument("--cost-queued", default="1000,10000")
    parser.add_argument("--cost-policies", default="greedy", help="queue policies the pass cost is measured under")
    parser.add_argument("--cost-only", action="store_true", help="measure the pass cost only (no replay)")
    args = parser.parse_args()
    if args.small:
        args.gpus, args.jobs, args.cost_gpus, args.cost_queued = 32, 150, "64,512", "200,1000"
    known = ("first-fit", "pack", "spread")  # apps.runtime.simulated.cluster.PLACEMENTS (Django is not set up yet)
    if unknown := [p for p in args.placements.split(",") if p not in known]:
        parser.error(f"--placements: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    prepare("scheduling")

    from tests.factories import UserFactory

    owner = UserFactory(username="bench")
    load_before = os.getloadavg()
    if not args.cost_only:
        replays(args, owner)
    cost_table(args, owner)
    loads = " ".join(f"{v:.2f}" for v in load_before), " ".join(f"{v:.2f}" for v in os.getloadavg())
    print("load average before: {}, after: {}".format(*loads))


def replays(args: argparse.Namespace, owner) -> None:
    from django.conf import settings

    from apps.jobs.simulation import replay_portal
    from apps.runtime.simulated.cluster import SimCluster
    from apps.runtime.simulated.replay import AnyFit, Fifo, one_pool, replay, summarise
    from apps.runtime.simulated.traces import SIZE_BUCKETS, generate, load_csv

    if args.trace:
        trace = load_csv(args.trace)
    else:
        trace = generate(jobs=args.jobs, gpus=args.gpus, load=args.load, teams=args.teams, seed=args.seed)
    nodes = max(args.gpus // 8, 1)
    placements = args.placements.split(",")
    # With several placements each row says its own: "greedy + borrowing [spread]".
    tag = {p: f" [{p}]" if len(placements) > 1 else "" for p in placements}
    # The reference first: what a queue that never preempts could keep busy at most (no nodes, no quotas).
    pool = one_pool(SimCluster(nodes, 8))
    summaries, deciders = [summarise(replay(trace, pool, AnyFit(pool)))], []
    for placement in placements:
        fifo_cluster = SimCluster(nodes, 8, placement=placement)
        summaries.append(summarise(replay(trace, fifo_cluster, Fifo(fifo_cluster))))
        summaries[-1].label += tag[placement]
    for name in args.policies.split(","):
        for placement in placements:
            outcome, decider = replay_portal(trace, SimCluster(nodes, 8, placement=placement), owner, policy=name)
            summaries.append(summarise(outcome))
            summaries[-1].label += tag[placement]
            decider.label += tag[placement]
            deciders.append(decider)

    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    ones = sum(1 for j in trace.jobs if j.gpus == 1) / len(trace.jobs)
    offered = trace.gpu_seconds() / (nodes * 8 * trace.span)
    largest = max(j.gpus for j in trace.jobs)
    print(f"\nTrace: {len(trace.jobs)} jobs over {fmt_s(trace.span)}, {len(trace.projects)} projects, "
          f"seed {args.seed}, {ones:.0%} 1-GPU jobs, largest {largest} GPUs; GPU time asked for = "
          f"{offered:.0%} of the cluster's over that span. "
          f"Cluster: {nodes} nodes × 8 GPUs. Database: {engine}.")  # fmt: skip
    buckets = [name for name, _lo, _hi in SIZE_BUCKETS]
    header = ["policy", "GPU util", "useful", "mean JCT", "p95 JCT"] + [f"p95 wait {b}" for b in buckets]
    header += ["max wait >8", "preempted", "lost", "unfinished", "wall"]
    label_width = max(30, *(len(s.label) + 1 for s in summaries))
    widths = [label_width, 9, 8, 9, 9] + [13] * len(buckets) + [13, 10, 7, 11, 8]
    print("".join(f"{h:>{w}}" if i else f"{h:<{w}}" for i, (h, w) in enumerate(zip(header, widths, strict=True))))
    for s in summaries:
        cells = [s.label, f"{s.utilisation:.1%}", f"{s.useful:.1%}", fmt_s(s.mean_jct), fmt_s(s.p95_jct)]
        cells += [fmt_s(s.p95_wait[b]) for b in buckets] + [fmt_s(s.starvation), str(s.preempted), f"{s.lost:.1%}"]
        cells += [str(s.unfinished), f"{s.wall_s:.0f}s"]
        print("".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    if trace.quotas:
        print("\nShare of each project's GPU quota used over the trace (GPU-seconds held / quota × span)")
        projects = sorted(trace.quotas)
        print(f"{'policy':<{label_width}}" + "".join(f"{p[-7:]:>9}" for p in projects))
        quota_row = "".join(f"{trace.quotas[p] or 0:>9}" for p in projects)
        print(f"{'(quota, GPUs)':<{label_width}}{quota_row}")
        for s in summaries:
            print(f"{s.label:<{label_width}}" + "".join(f"{s.quota_share.get(p, 0):>9.0%}" for p in projects))
    print()
    for d in deciders:
        print(f"{d.label}: {d.passes} advances (each with its dispatch pass), "
              f"{d.pass_seconds / max(d.passes, 1) * 1000:.1f} ms each on average")  # fmt: skip


def cost_table(args: argparse.Namespace, owner) -> None:
    from django.test.utils import override_settings

    from apps.jobs.simulation import dispatch_cost, policy_settings

    print("\nCost of one dispatch pass (1-GPU tasks waiting, 8 projects with quotas)")
    print(f"{'policy':>9}{'GPUs':>6}{'queued':>9}{'first pass':>12}{'steady pass':>13}{'per queued task':>17}"
          f"{'queries':>9}")  # fmt: skip
    for policy in args.cost_policies.split(","):
        for gpus in (int(g) for g in args.cost_gpus.split(",")):
            for queued in (int(q) for q in args.cost_queued.split(",")):
                with override_settings(**policy_settings(policy)):
                    cost = dispatch_cost(gpus=gpus, queued=queued, owner=owner)
                print(f"{policy:>9}{gpus:>6}{queued:>9}{cost['first']:>11.2f}s{cost['steady'] * 1000:>10.0f} ms"
                      f"{cost['steady'] / queued * 1e6:>14.0f} µs{cost['steady_queries']:>9}")  # fmt: skip


if __name__ == "__main__":
    main()
