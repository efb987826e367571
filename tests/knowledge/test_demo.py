"""The demo's knowledge base over the portal's own README and docs/."""

from __future__ import annotations

import pytest

from apps.knowledge import demo, services
from apps.knowledge.models import Document

pytestmark = pytest.mark.django_db


def test_the_demo_base_answers_from_the_readme_and_says_not_found_otherwise(world):
    kb = demo.populate(world.project_a, world.alice)
    names = set(kb.documents.values_list("name", flat=True))
    assert {"README.md", "docs/knowledge.md"} <= names
    readme = kb.documents.get(name="README.md")
    services.ingest_document(readme.pk)
    readme.refresh_from_db()
    assert readme.status == Document.Status.READY

    result = services.query(kb, "How do I run the tests?")
    assert not result.not_found
    assert result.passages[0].chunk.document == readme
    assert "make test" in result.passages[0].chunk.text

    assert services.query(kb, "What is the capital of Peru?").not_found


def test_the_demo_is_idempotent(world):
    demo.populate(world.project_a, world.alice)
    count = Document.objects.count()
    kb = demo.populate(world.project_a, world.alice)
    assert kb.documents.count() == count
    assert set(kb.documents.values_list("version", flat=True)) == {1}
