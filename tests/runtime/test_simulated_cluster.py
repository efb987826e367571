"""The simulated cluster (placement, virtual clock, utilisation) and the FIFO baseline's replay
(apps/runtime/simulated/)."""

from __future__ import annotations

import pytest

from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.replay import Fifo, percentile, replay, summarise
from apps.runtime.simulated.traces import Job, Trace, generate
from apps.runtime.workload import Phase


def check_capacity(cluster: SimCluster) -> None:
    for node in cluster.nodes:
        assert 0 <= node.free_gpus <= node.gpus
        assert node.free_cpus >= -1e-9
        assert node.free_memory >= 0
    assert cluster.busy_gpus == sum(n.gpus - n.free_gpus for n in cluster.nodes) <= cluster.total_gpus


def test_small_jobs_share_a_node_and_large_ones_take_whole_nodes():
    cluster = SimCluster(nodes=3, gpus_per_node=8)
    a = cluster.submit("a", 4, 8, 0, 100)
    big = cluster.submit("big", 16, 32, 0, 50)
    assert a.placement == [(0, 4, 8, 0)]
    assert [p[0] for p in big.placement] == [1, 2]
    assert big.phase == Phase.RUNNING
    late = cluster.submit("late", 8, 8, 0, 10)  # 4 GPUs free, none on a whole node: waits in the runtime
    assert late.phase == Phase.PENDING
    assert cluster.pending == ["late"]
    assert cluster.held().gpu == 28
    assert cluster.finish_next() is big
    assert cluster.now == 50
    assert late.phase == Phase.RUNNING
    assert late.started_at == 50
    check_capacity(cluster)


def test_the_clock_integrates_busy_gpus():
    cluster = SimCluster(nodes=1, gpus_per_node=8)
    cluster.submit("a", 2, 1, 0, 10)
    cluster.advance_to(4)
    cluster.submit("b", 4, 1, 0, 2)
    while cluster.next_end() is not None:
        cluster.finish_next()
    assert cluster.now == 10
    assert cluster.busy_gpu_seconds() == pytest.approx(2 * 10 + 4 * 2)
    assert cluster.busy_gpu_seconds(5) == pytest.approx(2 * 5 + 4 * 1)
    with pytest.raises(ValueError, match="cannot go back"):
        cluster.advance_to(3)


def test_fifo_blocks_behind_the_head_job():
    trace = Trace(
        [Job(1, 0, "a", 6, 1, 0, 100), Job(2, 1, "a", 4, 1, 0, 10), Job(3, 2, "a", 1, 1, 0, 10)],
        {"a": None},
    )
    cluster = SimCluster(nodes=1, gpus_per_node=8)
    outcome = replay(trace, cluster, Fifo(cluster))
    # Job 3 would fit beside job 1, but job 2 is ahead of it: strict order.
    assert outcome.started == {1: 0, 2: 100, 3: 100}
    assert outcome.ended == {1: 100, 2: 110, 3: 110}


def test_fifo_replays_a_generated_trace_within_capacity():
    trace = generate(jobs=200, gpus=32, load=1.2, seed=2)
    cluster = SimCluster(nodes=4, gpus_per_node=8)
    cluster.on_change = check_capacity
    outcome = replay(trace, cluster, Fifo(cluster))
    assert outcome.unfinished == 0
    summary = summarise(outcome)
    assert 0 < summary.utilisation <= 1
    assert summary.p95_jct >= summary.mean_jct * 0.5
    assert set(summary.p95_wait) == {"1", "2-4", "5-8", ">8"}
    assert set(summary.quota_share) == set(trace.quotas)


def test_percentile_is_nearest_rank():
    assert percentile([5, 1, 3, 2, 4], 95) == 5
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile([], 95) != percentile([], 95)  # nan
