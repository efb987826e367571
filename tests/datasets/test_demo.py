from __future__ import annotations

from apps.datasets import demo
from apps.datasets.services import diff_versions, resolve_dataset_arg


def test_the_demo_has_iris_in_two_versions_and_is_idempotent(world):
    demo.populate(world.project_a, world.alice)
    dataset = demo.populate(world.project_a, world.alice)
    assert dataset.versions.count() == 2
    v1, v2 = resolve_dataset_arg(world.project_a, "iris@1"), resolve_dataset_arg(world.project_a, "iris@latest")
    assert v1.statistics["iris.csv"]["row_count"] == 150
    species = v1.statistics["iris.csv"]["columns"][-1]
    assert (species["name"], species["distinct"]) == ("species", 3)
    diff = diff_versions(v1, v2)
    assert diff["schema_changes"]["iris.csv"]["added"] == ["petal_ratio"]
    assert diff["rows"]["delta"] == 0
