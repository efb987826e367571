"""How many replicas hold a workload's per-replica resources, and what the whole job asks for: the one count the
save-time check, the queue, the local runtime's capacity and the usage pages share."""

from __future__ import annotations

import pytest

from apps.runtime.workload import demand, total_replicas
from portal.lib.resources import Resources


@pytest.mark.parametrize(
    ("kind", "replicas", "framework", "runtime", "expected"),
    [
        ("job", {"worker": 4}, "", "local", 1),  # not distributed: one process
        ("distributed", {}, "pytorch", "local", 1),  # no replicas given: one worker
        ("distributed", {"master": 1, "worker": 3}, "pytorch", "kubernetes", 4),
        ("distributed", {"ps": 2, "worker": 4}, "tensorflow", "local", 6),
        ("distributed", {"chief": 1, "worker": 2, "evaluator": 1}, "tensorflow", "kubernetes", 4),
        ("distributed", {"launcher": 1, "worker": 2}, "mpi", "kubernetes", 2),  # the launcher holds no GPU
        ("distributed", {"worker": "3"}, "pytorch", "local", 3),
        ("distributed", {"driver": 1, "executor": 2}, "spark", "kubernetes", 3),
        ("distributed", {"driver": 1, "executor": 2}, "spark", "local", 1),  # one JVM locally (docs/spark.md)
    ],
)
def test_total_replicas_sums_every_role_that_holds_the_resources(kind, replicas, framework, runtime, expected):
    assert total_replicas(kind, replicas, framework=framework, runtime=runtime) == expected


def test_a_jobs_demand_is_its_resources_times_its_replicas():
    each = Resources.of(2, 8 * 2**30, 4)
    assert demand(each, 2) == Resources.of(4, 16 * 2**30, 8)
    assert demand(each, 1) == each
