from __future__ import annotations

import pytest

from apps.datasets.services import diff_versions
from apps.datasets.tasks import analyze_version
from tests.conftest import user_client
from tests.factories import dataset, dataset_version


def _two_versions(world):
    ds = dataset(world.project_a, world.alice)
    v1 = dataset_version(ds, {"iris.csv": b"a,b\n1,2\n3,4\n", "old.txt": b"old", "same.txt": b"same"})
    v2 = dataset_version(ds, {"iris.csv": b"a,b,c\n1,2,x\n3,4,y\n5,6,z\n", "new.txt": b"new", "same.txt": b"same"})
    analyze_version(v1.pk)
    analyze_version(v2.pk)
    v1.refresh_from_db()
    v2.refresh_from_db()
    return v1, v2


@pytest.mark.smoke
def test_diff_lists_files_rows_and_schema_changes(world):
    v1, v2 = _two_versions(world)
    diff = diff_versions(v1, v2)
    assert diff["added"] == [{"path": "new.txt", "size": 3}]
    assert diff["removed"] == [{"path": "old.txt", "size": 3}]
    assert diff["changed"] == [{"path": "iris.csv", "old_size": 12, "new_size": 24}]
    assert diff["unchanged"] == 1
    assert diff["rows"] == {"old": 2, "new": 3, "delta": 1}
    assert diff["schema_changes"] == {"iris.csv": {"added": ["c"], "removed": [], "type_changed": {}}}


def test_the_diff_endpoint_defaults_to_the_parent(world):
    v1, v2 = _two_versions(world)
    client = user_client(world.bob)
    response = client.get(f"/api/v1/dataset-versions/{v2.pk}/diff/")
    assert response.status_code == 200
    assert response.json()["old"] == 1
    assert response.json()["rows"]["delta"] == 1
    reverse = client.get(f"/api/v1/dataset-versions/{v1.pk}/diff/?other={v2.pk}").json()
    assert reverse["rows"]["delta"] == -1
    assert reverse["added"] == [{"path": "old.txt", "size": 3}]
    first = client.get(f"/api/v1/dataset-versions/{v1.pk}/diff/")
    assert first.status_code == 400
    assert "no parent" in first.json()["other"][0]


def test_the_diff_endpoint_cannot_compare_with_another_projects_version(world):
    _v1, v2 = _two_versions(world)
    theirs = dataset_version(dataset(world.project_b, world.charlie))
    response = user_client(world.alice).get(f"/api/v1/dataset-versions/{v2.pk}/diff/?other={theirs.pk}")
    assert response.status_code == 404


def test_schema_changes_wait_for_the_analysis_of_both_versions(world):
    ds = dataset(world.project_a, world.alice)
    v1 = dataset_version(ds, {"iris.csv": b"a,b\n1,2\n"})
    analyze_version(v1.pk)
    v1.refresh_from_db()
    v2 = dataset_version(ds, {"iris.csv": b"a,b\n1,2\n", "more.csv": b"c\n3\n"})  # not analysed yet
    diff = diff_versions(v1, v2)
    assert diff["schema_changes"] is None
    assert diff["analysis_pending"] is True
    assert diff["added"] == [{"path": "more.csv", "size": 4}]
    assert diff["rows"]["delta"] is None
