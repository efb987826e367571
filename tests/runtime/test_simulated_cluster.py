"""The simulated cluster (placement, virtual clock, utilisation) and the FIFO baseline's replay
(apps/runtime/simulated/)."""

from __future__ import annotations

import random

import pytest

from apps.runtime.simulated.cluster import FIRST_FIT, PACK, PLACEMENTS, SPREAD, SimCluster
from apps.runtime.simulated.replay import AnyFit, Fifo, one_pool, percentile, replay, summarise
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


def partly_used(placement: str) -> SimCluster:
    """Three nodes of 8 GPUs with 6, 3 and 8 free."""
    cluster = SimCluster(nodes=3, gpus_per_node=8, placement=SPREAD)
    cluster.submit("x", 2, 1, 0, 100)  # all nodes equal: the first
    cluster.submit("y", 5, 1, 0, 100)  # nodes 1 and 2 equal: node 1
    assert [n.free_gpus for n in cluster.nodes] == [6, 3, 8]
    cluster.placement = placement
    return cluster


@pytest.mark.parametrize(
    ("placement", "two", "four"),
    [(FIRST_FIT, 0, 0), (PACK, 1, 0), (SPREAD, 2, 2)],
)
def test_each_placement_chooses_its_node(placement: str, two: int, four: int):
    cluster = partly_used(placement)
    assert cluster.submit("two", 2, 1, 0, 10).placement == [(two, 2, 1, 0)]
    cluster = partly_used(placement)
    # Pack: node 1 has 3 free, too few for 4; node 0 is then the fullest that fits.
    assert cluster.submit("four", 4, 1, 0, 10).placement == [(four, 4, 1, 0)]


def test_pack_breaks_ties_by_index_and_spread_too():
    for placement in (PACK, SPREAD):
        cluster = SimCluster(nodes=3, gpus_per_node=8, placement=placement)
        assert cluster.submit("a", 1, 1, 0, 10).placement[0][0] == 0


def test_a_gang_takes_whole_idle_nodes_under_every_placement():
    for placement in PLACEMENTS:
        cluster = partly_used(placement)
        cluster.nodes.append(type(cluster.nodes[0])(8, 64, 1 << 40))
        assert [p[0] for p in cluster.submit("gang", 16, 2, 0, 10).placement] == [2, 3]


def test_an_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="unknown placement 'best-fit'; known: first-fit, pack, spread"):
        SimCluster(nodes=1, placement="best-fit")


def test_pack_leaves_whole_nodes_for_a_gang_that_spread_blocks():
    outcomes = {}
    for placement in (PACK, SPREAD):
        cluster = SimCluster(nodes=4, gpus_per_node=8, placement=placement)
        for i in range(8):
            cluster.submit(f"one-{i}", 1, 1, 0, 100)
        gang = cluster.submit("gang", 16, 2, 0, 10)
        outcomes[placement] = (sum(n.idle for n in cluster.nodes), gang.phase)
    assert outcomes[PACK] == (1, Phase.RUNNING)  # 8 one-GPU jobs on node 0, the gang on nodes 1 and 2
    assert outcomes[SPREAD] == (0, Phase.PENDING)  # two on each node: no node is whole


def idle_nodes_over(placement: str, seed: int = 3) -> list[int]:
    """The same random sequence of 1-, 2- and 4-GPU jobs (arrivals and ends) on 6 × 8 GPUs: idle nodes after each."""
    rng = random.Random(seed)
    cluster = SimCluster(nodes=6, gpus_per_node=8, placement=placement)
    cluster.on_change = check_capacity
    idle = []
    for i in range(300):
        arrival = cluster.now + rng.expovariate(1 / 60)
        while cluster.next_end() is not None and cluster.next_end() <= arrival:
            cluster.finish_next()
        cluster.advance_to(arrival)
        cluster.submit(f"j{i}", rng.choice((1, 1, 1, 2, 4)), 1, 0, rng.uniform(300, 1800))
        idle.append(sum(n.idle for n in cluster.nodes))
    return idle


def test_pack_keeps_more_whole_nodes_idle_than_spread_on_the_same_sequence():
    pack, spread = idle_nodes_over(PACK), idle_nodes_over(SPREAD)
    assert sum(pack) > 3 * sum(spread)  # 336 against 19 (idle nodes summed over the 300 arrivals)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_no_placement_exceeds_capacity_on_a_generated_trace(placement: str):
    trace = generate(jobs=150, gpus=32, load=1.5, seed=4)
    cluster = SimCluster(nodes=4, gpus_per_node=8, placement=placement)
    cluster.on_change = check_capacity
    outcome = replay(trace, cluster, Fifo(cluster))
    assert outcome.unfinished == 0
    assert cluster.peak_busy_gpus <= cluster.total_gpus


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


def test_the_any_fit_bound_lets_whatever_fits_pass_and_one_pool_has_no_fragments():
    trace = Trace(
        [Job(1, 0, "a", 6, 1, 0, 100), Job(2, 1, "a", 4, 1, 0, 10), Job(3, 2, "a", 1, 1, 0, 10)],
        {"a": None},
    )
    cluster = SimCluster(nodes=1, gpus_per_node=8)
    assert replay(trace, cluster, AnyFit(cluster)).started == {1: 0, 2: 100, 3: 2}  # job 3 passes job 2
    # Two nodes with 3 GPUs free each cannot take a 4-GPU job; one pool of their sum can.
    nodes = SimCluster(nodes=2, gpus_per_node=6, cpus_per_node=8, memory_per_node=100)
    pool = one_pool(nodes)
    assert (len(pool.nodes), pool.total_gpus, pool.total.cpu, pool.total.memory) == (1, 12, 16, 200)
    # 3 + 3 GPUs held on two nodes of 4: 2 GPUs free, one on each node. A 2-GPU job waits on the nodes, not in one
    # pool of their sum.
    fragments = Trace([Job(1, 0, "a", 3, 1, 0, 50), Job(2, 0, "a", 3, 1, 0, 50), Job(3, 1, "a", 2, 1, 0, 10)], {})
    nodes = SimCluster(nodes=2, gpus_per_node=4)
    assert replay(fragments, nodes, AnyFit(nodes)).started[3] == 50
    pooled = one_pool(SimCluster(nodes=2, gpus_per_node=4))
    assert replay(fragments, pooled, AnyFit(pooled)).started[3] == 1


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
