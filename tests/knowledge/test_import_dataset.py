"""A dataset version's readable files become documents of a knowledge base of the same project."""

from __future__ import annotations

import pytest

from apps.knowledge import services
from apps.knowledge.models import Document
from tests import factories
from tests.conftest import user_client
from tests.knowledge.factories import knowledge_base

pytestmark = pytest.mark.django_db


def test_a_versions_readable_files_become_documents(world):
    ds = factories.dataset(world.project_a, world.alice, name="docs")
    files = {"guide/setup.md": b"# Setup\n\nInstall with make install.\n", "table.csv": b"a,b\n1,2\n", "x.bin": b"\x00"}
    factories.dataset_version(ds, files, user=world.alice)
    kb = knowledge_base(world.project_a, world.alice)
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/import-dataset/", {"dataset": "docs@1", "tags": ["docs"]}, format="json"
    )
    assert response.status_code == 201, response.content
    docs = {d.name: d for d in Document.objects.filter(knowledge_base=kb)}
    assert set(docs) == {"guide/setup.md", "table.csv"}
    assert docs["guide/setup.md"].source == "docs@1"
    assert docs["guide/setup.md"].tags == ["docs"]
    services.ingest_document(docs["guide/setup.md"].pk)
    assert "make install" in docs["guide/setup.md"].chunks.get().text


def test_another_projects_dataset_is_not_found(world):
    ds = factories.dataset(world.project_b, world.charlie, name="theirs")
    factories.dataset_version(ds, {"a.md": b"# A"}, user=world.charlie)
    kb = knowledge_base(world.project_a, world.alice)
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/import-dataset/", {"dataset": "theirs@1"}, format="json"
    )
    assert response.status_code == 400
    assert "dataset" in response.json()
    assert not Document.objects.exists()
