"""The lineage endpoints of a dataset and of a version answer the whole list, as their published schema says (a
paginated object was documented while a bare list came back: schemathesis's stateful phase caught it)."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.datasets.models import DatasetUsage
from tests.conftest import user_client
from tests.factories import dataset, dataset_version

DATASET_LINEAGE = "/api/v1/datasets/{id}/lineage/"
VERSION_LINEAGE = "/api/v1/dataset-versions/{id}/lineage/"


@pytest.fixture
def version(world):
    version = dataset_version(dataset(world.project_a, world.alice), {"a.csv": b"x\n1\n"})
    DatasetUsage.objects.create(version=version, direction="in")
    DatasetUsage.objects.create(version=version, direction="out")
    return version


@pytest.mark.parametrize("path", [DATASET_LINEAGE, VERSION_LINEAGE])
def test_the_schema_documents_lineage_as_a_plain_list(path):
    schema = SchemaGenerator().get_schema(request=None, public=True)

    body = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert body["type"] == "array"
    assert body["items"] == {"$ref": "#/components/schemas/Usage"}


@pytest.mark.parametrize(("path", "of"), [(DATASET_LINEAGE, "dataset"), (VERSION_LINEAGE, "version")])
def test_lineage_answers_every_usage_as_a_list(world, version, path, of):
    target = version.dataset if of == "dataset" else version

    response = user_client(world.alice).get(path.format(id=target.pk))

    assert response.status_code == 200
    assert sorted(row["direction"] for row in response.json()) == ["in", "out"]
