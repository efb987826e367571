"""Knowledge base pages: list, create, upload, live documents table, search debug view, passages, sharing."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.knowledge import services
from apps.knowledge.models import Document, KnowledgeBase
from tests.factories import ProjectFactory, UserFactory
from tests.knowledge.factories import HANDBOOK, ingested, knowledge_base

pytestmark = pytest.mark.django_db


def test_a_member_creates_a_base_and_uploads_a_document(world, client):
    client.force_login(world.bob)
    response = client.post("/p/project-a/knowledge/new/", {"name": "handbook", "description": "Ours"})
    kb = KnowledgeBase.objects.get(project=world.project_a, name="handbook")
    assert response.status_code == 302
    assert response["Location"] == f"/p/project-a/knowledge/{kb.pk}/"
    upload = SimpleUploadedFile("handbook.md", HANDBOOK)
    response = client.post(f"/p/project-a/knowledge/{kb.pk}/upload/", {"file": upload, "tags": "ops, team"})
    assert response.status_code == 302
    doc = Document.objects.get(knowledge_base=kb)
    assert doc.tags == ["ops", "team"]
    assert doc.status == Document.Status.PENDING
    page = client.get(f"/p/project-a/knowledge/{kb.pk}/").content.decode()
    assert "handbook.md" in page
    assert 'data-status="pending"' in page


def test_a_duplicate_name_shows_the_services_error(world, client):
    knowledge_base(world.project_a, world.alice, name="handbook")
    client.force_login(world.bob)
    response = client.post("/p/project-a/knowledge/new/", {"name": "handbook"})
    assert response.status_code == 400
    assert "already has a knowledge base" in response.content.decode()


def test_an_unsupported_file_is_a_form_error(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    client.force_login(world.bob)
    response = client.post(f"/p/project-a/knowledge/{kb.pk}/upload/", {"file": SimpleUploadedFile("a.exe", b"MZ")})
    assert response.status_code == 400
    assert "Unsupported file type" in response.content.decode()
    assert not Document.objects.exists()


def test_the_documents_partial_shows_failures_with_their_reason(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    ingested(kb, name="broken.pdf", data=b"%PDF-1.4 nope")
    client.force_login(world.bob)
    html = client.get(f"/p/project-a/knowledge/{kb.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert html.startswith('<div id="kb-documents"')
    assert 'data-status="failed"' in html
    assert "PDF cannot be read" in html


def test_the_search_view_shows_scores_and_links_passages(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    client.force_login(world.bob)
    html = client.get(f"/p/project-a/knowledge/{kb.pk}/search/", {"q": "How do I run the tests?"}).content.decode()
    top = doc.chunks.get(text__contains="make test")
    assert f'data-passage="{top.pk}"' in html
    assert f"/p/project-a/knowledge/documents/{doc.pk}/#chunk-{top.pk}" in html
    assert html.index(f'data-passage="{top.pk}"') < html.index("</tbody>")
    assert "data-not-found" not in html
    passage = client.get(f"/p/project-a/knowledge/documents/{doc.pk}/").content.decode()
    assert f'id="chunk-{top.pk}"' in passage


def test_the_search_view_says_not_found(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    ingested(kb)
    client.force_login(world.bob)
    html = client.get(f"/p/project-a/knowledge/{kb.pk}/search/", {"q": "What is the capital of Peru?"})
    assert "data-not-found" in html.content.decode()


def test_a_shared_project_reads_but_cannot_write(world, client):
    kb = knowledge_base(world.project_a, world.alice, name="handbook")
    doc = ingested(kb)
    services.share_knowledge_base(kb, "project-b", world.alice)
    client.force_login(world.charlie)
    assert "handbook" in client.get("/p/project-b/knowledge/").content.decode()
    detail = client.get(f"/p/project-b/knowledge/{kb.pk}/")
    assert detail.status_code == 200
    assert "read-only" in detail.content.decode()
    assert client.get(f"/p/project-b/knowledge/{kb.pk}/search/", {"q": "roll back"}).status_code == 200
    assert client.get(f"/p/project-b/knowledge/documents/{doc.pk}/").status_code == 200
    upload = client.post(f"/p/project-b/knowledge/{kb.pk}/upload/", {"file": SimpleUploadedFile("x.md", b"# X")})
    assert upload.status_code == 403
    assert client.post(f"/p/project-b/knowledge/{kb.pk}/delete/").status_code == 403
    assert client.post(f"/p/project-b/knowledge/documents/{doc.pk}/delete/").status_code == 403
    assert client.post(f"/p/project-b/knowledge/{kb.pk}/share/", {"project": "project-c"}).status_code == 403
    assert Document.objects.filter(knowledge_base=kb).count() == 1


def test_a_third_project_gets_404(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    services.share_knowledge_base(kb, "project-b", world.alice)
    dave = UserFactory(username="dave")
    ProjectFactory(owner=dave, slug="project-c", name="Project C")
    client.force_login(dave)
    assert client.get(f"/p/project-c/knowledge/{kb.pk}/").status_code == 404
    assert client.get(f"/p/project-c/knowledge/{kb.pk}/search/", {"q": "x"}).status_code == 404
    assert client.get(f"/p/project-c/knowledge/documents/{doc.pk}/").status_code == 404
    assert client.get(f"/p/project-b/knowledge/{kb.pk}/").status_code == 404
    assert "kb-" not in client.get("/p/project-c/knowledge/").content.decode()


def test_the_owner_shares_from_the_page(world, client):
    kb = knowledge_base(world.project_a, world.alice)
    client.force_login(world.alice)
    response = client.post(f"/p/project-a/knowledge/{kb.pk}/share/", {"project": "project-b"})
    assert response.status_code == 302
    assert list(kb.shares.values_list("project__slug", flat=True)) == ["project-b"]
    bad = client.post(f"/p/project-a/knowledge/{kb.pk}/share/", {"project": "nope"})
    assert bad.status_code == 400
    assert "No project has this slug" in bad.content.decode()
