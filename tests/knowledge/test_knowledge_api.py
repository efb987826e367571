"""The knowledge base API: create, upload, list documents, query, and sharing with other projects."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.knowledge import services
from apps.knowledge.models import Document, KnowledgeBase
from apps.projects.models import Role
from tests.conftest import user_client
from tests.factories import ProjectFactory, UserFactory, add_member
from tests.knowledge.factories import HANDBOOK, ingested, knowledge_base

pytestmark = pytest.mark.django_db


def test_a_member_creates_a_knowledge_base(world):
    response = user_client(world.bob).post(
        "/api/v1/knowledge-bases/", {"project": "project-a", "name": "handbook"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert KnowledgeBase.objects.get(pk=response.json()["id"]).project == world.project_a


def test_a_duplicate_name_is_a_field_error(world):
    knowledge_base(world.project_a, world.alice, name="handbook")
    response = user_client(world.bob).post(
        "/api/v1/knowledge-bases/", {"project": "project-a", "name": "handbook"}, format="json"
    )
    assert response.status_code == 400
    assert "name" in response.json()


def test_upload_then_query_returns_cited_passages(world):
    kb = knowledge_base(world.project_a, world.alice)
    client = user_client(world.bob)
    upload = SimpleUploadedFile("handbook.md", HANDBOOK, content_type="text/markdown")
    response = client.post(f"/api/v1/knowledge-bases/{kb.pk}/upload/", {"file": upload, "tags": ["team"]})
    assert response.status_code == 201, response.content
    doc = Document.objects.get(pk=response.json()["id"])
    assert doc.tags == ["team"]
    assert doc.status == Document.Status.PENDING
    services.ingest_document(doc.pk)

    again = client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/upload/", {"file": SimpleUploadedFile("handbook.md", HANDBOOK)}
    )
    assert again.status_code == 200
    assert again.json()["version"] == 1

    listed = client.get(f"/api/v1/knowledge-bases/{kb.pk}/documents/").json()["results"]
    assert [(d["name"], d["status"]) for d in listed] == [("handbook.md", "ready")]

    result = client.post(
        f"/api/v1/knowledge-bases/{kb.pk}/query/", {"query": "How do I run the tests?"}, format="json"
    ).json()
    assert not result["not_found"]
    top = result["passages"][0]
    assert "make test" in top["text"]
    assert top["heading_path"] == ["Handbook", "Running the tests"]
    assert top["number"] == 1
    assert top["lexical_rank"]
    assert top["dense_rank"]


def test_a_question_about_something_absent_is_not_found(world):
    kb = knowledge_base(world.project_a, world.alice)
    ingested(kb)
    result = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/query/", {"query": "What is the capital of Peru?"}, format="json"
    )
    assert result.json()["not_found"] is True


def test_filters_by_document_and_tag(world):
    kb = knowledge_base(world.project_a, world.alice)
    handbook = ingested(kb, tags=["ops"])
    other = ingested(kb, name="tests.md", data=b"# Tests\n\nThe tests run with pytest in CI.\n", tags=["dev"])
    client = user_client(world.bob)
    url = f"/api/v1/knowledge-bases/{kb.pk}/query/"
    by_doc = client.post(url, {"query": "run the tests", "documents": [other.pk]}, format="json").json()
    assert {p["document"] for p in by_doc["passages"]} == {other.pk}
    by_tag = client.post(url, {"query": "run the tests", "tags": ["ops"]}, format="json").json()
    assert {p["document"] for p in by_tag["passages"]} == {handbook.pk}


def test_the_document_list_filters_by_base_and_refuses_ids_no_key_can_hold(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    client = user_client(world.bob)
    listed = client.get("/api/v1/knowledge-documents/", {"knowledge_base": kb.pk}).json()
    assert [d["id"] for d in listed["results"]] == [doc.pk]
    for bad in ("99999999999999999999999", "1.5", "-3"):
        answer = client.get("/api/v1/knowledge-documents/", {"knowledge_base": bad})
        assert answer.status_code == 400, bad
        assert "knowledge_base" in answer.json()


def test_an_llm_endpoint_on_a_private_network_is_refused_unless_allowed(world, settings):
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    client = user_client(world.bob)
    body = {"project": "project-a", "name": "ext", "llm_url": "http://169.254.169.254/v1", "llm_model": "m"}
    refused = client.post("/api/v1/knowledge-bases/", body, format="json")
    assert refused.status_code == 400
    assert "OUTBOUND_ALLOWED_NETWORKS" in refused.json()["llm_url"][0]
    assert not KnowledgeBase.objects.filter(name="ext").exists()
    settings.OUTBOUND_ALLOWED_NETWORKS = ["169.254.0.0/16"]
    assert client.post("/api/v1/knowledge-bases/", body, format="json").status_code == 201


def test_a_chat_whose_endpoint_now_resolves_to_this_machine_is_refused(world, settings):
    kb = knowledge_base(world.project_a, world.alice, llm_url="http://localhost:9/v1", llm_model="m")
    ingested(kb)
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    answer = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/chat/", {"question": "How do I run the tests?"}, format="json"
    )
    assert answer.status_code == 400
    assert "OUTBOUND_ALLOWED_NETWORKS" in str(answer.json())


def test_bad_query_bodies_are_400(world):
    kb = knowledge_base(world.project_a, world.alice)
    client = user_client(world.bob)
    url = f"/api/v1/knowledge-bases/{kb.pk}/query/"
    assert client.post(url, {"query": ""}, format="json").status_code == 400
    assert client.post(url, {"query": "x", "k": 0}, format="json").status_code == 400
    assert client.post(url, {"query": "x", "mode": "magic"}, format="json").status_code == 400
    assert client.post(url, {"query": "x", "tags": ["bad tag!"]}, format="json").status_code == 400


def test_an_unsupported_upload_is_a_field_error(world):
    kb = knowledge_base(world.project_a, world.alice)
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/upload/", {"file": SimpleUploadedFile("a.exe", b"MZ")}
    )
    assert response.status_code == 400
    assert "file" in response.json()
    assert not Document.objects.exists()


# --- Sharing ----------------------------------------------------------------------------------------------------


@pytest.fixture
def shared(world):
    """A base of project A shared with project B (charlie's); dave's project C has no grant."""
    kb = knowledge_base(world.project_a, world.alice, name="handbook")
    doc = ingested(kb)
    services.share_knowledge_base(kb, "project-b", world.alice)
    dave = UserFactory(username="dave")
    ProjectFactory(owner=dave, slug="project-c", name="Project C")
    return kb, doc, dave


def test_the_shared_project_reads_the_base(world, shared):
    kb, doc, _dave = shared
    client = user_client(world.charlie)
    assert client.get(f"/api/v1/knowledge-bases/{kb.pk}/").status_code == 200
    assert kb.pk in [row["id"] for row in client.get("/api/v1/knowledge-bases/").json()["results"]]
    assert client.get(f"/api/v1/knowledge-bases/{kb.pk}/documents/").status_code == 200
    assert client.get(f"/api/v1/knowledge-documents/{doc.pk}/").status_code == 200
    result = client.post(f"/api/v1/knowledge-bases/{kb.pk}/query/", {"query": "roll back"}, format="json")
    assert result.status_code == 200
    assert result.json()["passages"]


def test_the_shared_project_cannot_write(world, shared):
    kb, doc, _dave = shared
    client = user_client(world.charlie)
    base = f"/api/v1/knowledge-bases/{kb.pk}/"
    assert client.patch(base, {"description": "mine now"}, format="json").status_code == 403
    assert client.delete(base).status_code == 403
    upload = client.post(f"{base}upload/", {"file": SimpleUploadedFile("x.md", b"# X")})
    assert upload.status_code == 403
    assert client.post(f"{base}share/", {"project": "project-c"}, format="json").status_code == 403
    assert client.delete(f"/api/v1/knowledge-documents/{doc.pk}/").status_code == 403
    assert client.post(f"/api/v1/knowledge-documents/{doc.pk}/reingest/").status_code == 403
    kb.refresh_from_db()
    assert kb.description == ""
    assert kb.documents.count() == 1
    assert kb.shares.count() == 1


def test_a_third_project_gets_404_everywhere(world, shared):
    kb, doc, dave = shared
    client = user_client(dave)
    base = f"/api/v1/knowledge-bases/{kb.pk}/"
    assert client.get(base).status_code == 404
    assert client.get(f"{base}documents/").status_code == 404
    assert client.post(f"{base}query/", {"query": "roll back"}, format="json").status_code == 404
    assert client.get(f"/api/v1/knowledge-documents/{doc.pk}/").status_code == 404
    assert kb.pk not in [row["id"] for row in client.get("/api/v1/knowledge-bases/").json()["results"]]


def test_unsharing_takes_the_access_back(world, shared):
    kb, _doc, _dave = shared
    response = user_client(world.alice).post(
        f"/api/v1/knowledge-bases/{kb.pk}/unshare/", {"project": "project-b"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["shared_with"] == []
    assert user_client(world.charlie).get(f"/api/v1/knowledge-bases/{kb.pk}/").status_code == 404


def test_only_project_admins_share(world):
    kb = knowledge_base(world.project_a, world.alice)
    viewer = UserFactory(username="viewer")
    add_member(world.project_a, viewer, Role.VIEWER)
    url = f"/api/v1/knowledge-bases/{kb.pk}/share/"
    assert user_client(world.bob).post(url, {"project": "project-b"}, format="json").status_code == 403
    ok = user_client(world.alice).post(url, {"project": "project-b"}, format="json")
    assert ok.status_code == 200
    assert ok.json()["shared_with"] == ["project-b"]
    missing = user_client(world.alice).post(url, {"project": "nope"}, format="json")
    assert missing.status_code == 400
    assert "project" in missing.json()
