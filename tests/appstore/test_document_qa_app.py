"""The built-in `document-qa` app and the `knowledge_bases` section: installed into a fresh project it makes a
knowledge base over the sample handbook wired to an `llm` chat service; the documents ingest and a retrieval query
returns a handbook passage; a dataset chosen in the form replaces the samples; uninstall removes the base (documents,
chunks) and the service; broken entries are refused with their fields' paths. A live answer from the packaged chat
model runs where .venv-llm is built (tests/serving/llm.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.appstore import bundle as bundles
from apps.appstore.manifest import validate_manifest
from apps.appstore.models import Installation
from apps.appstore.services import add_version, install, plan, uninstall
from apps.knowledge import services as knowledge
from apps.knowledge.models import Chunk, Document, KnowledgeBase
from apps.outbox.models import PendingTask
from apps.serving.models import Framework, InferenceService
from apps.serving.tasks import deploy_when_possible
from tests import factories
from tests.appstore.factories import builtin_version, manifest, tiny_bundle
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


def ingest(kb: KnowledgeBase) -> None:
    for doc in kb.documents.all():
        knowledge.ingest_document(doc.pk)


@pytest.fixture
def installed(world):
    installation = install(builtin_version("document-qa"), world.project_a, world.alice, name="qa")
    [kb] = installation.objects_of("knowledge_bases")
    return installation, kb


def test_it_creates_a_knowledge_base_over_the_handbook_answered_by_its_chat_service(world, installed):
    installation, kb = installed

    [service] = installation.objects_of("services")
    assert (service.name, service.framework, service.registered_model) == ("qa-chat", Framework.LLM, None)
    assert service.memory_bytes >= 1536 * 2**20
    assert (kb.name, kb.project, kb.llm_service) == ("qa", world.project_a, service)
    docs = {d.name: d for d in kb.documents.all()}
    assert set(docs) == {"onboarding.md", "expenses.md", "on-call.md"}
    assert {d.source for d in docs.values()} == {"qa-handbook@1"}
    assert all(d.status == Document.Status.PENDING and d.tags == ["handbook"] for d in docs.values())
    # The service is deployed once the install commits, as the demo's chat service is.
    assert PendingTask.objects.filter(name=deploy_when_possible.name, args__0=service.pk).exists()


def test_the_documents_ingest_and_a_query_returns_a_handbook_passage(world, installed):
    _installation, kb = installed

    ingest(kb)

    assert set(kb.documents.values_list("status", flat=True)) == {Document.Status.READY}
    result = knowledge.query(kb, "How many days do I have to file an expense claim?", k=3)
    assert not result.not_found
    best = result.passages[0].chunk
    assert best.document.name == "expenses.md"
    assert "within 30 days" in best.text
    response = user_client(world.bob).post(
        f"/api/v1/knowledge-bases/{kb.pk}/query/", {"query": "Who do I escalate to when I am paged?"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert "Escalate to the team lead" in str(body), body


def test_a_dataset_chosen_in_the_form_replaces_the_samples(world):
    ds = factories.dataset(world.project_a, world.alice, name="policies")
    leave = b"# Leave\n\nYou have 28 days of paid leave a year.\n"
    factories.dataset_version(ds, {"leave.md": leave}, user=world.alice)

    installation = install(
        builtin_version("document-qa"), world.project_a, world.alice, name="qa", parameters={"documents": "policies@1"}
    )

    [kb] = installation.objects_of("knowledge_bases")
    assert list(kb.documents.values_list("name", "source")) == [("leave.md", "policies@1")]
    ingest(kb)
    assert "28 days" in knowledge.query(kb, "How many days of paid leave?").passages[0].chunk.text


def test_an_unknown_dataset_is_a_field_error_and_nothing_is_made(world):
    with pytest.raises(ValidationError) as caught:
        install(builtin_version("document-qa"), world.project_a, world.alice, parameters={"documents": "nope@3"})

    assert list(caught.value.message_dict) == ["spec.knowledge_bases[0].dataset"]
    assert not Installation.objects.exists()
    assert not KnowledgeBase.objects.exists()
    assert not Document.objects.exists()
    assert not InferenceService.objects.exists()
    assert not PendingTask.objects.filter(name=deploy_when_possible.name).exists()


def test_uninstall_removes_the_base_its_documents_and_chunks_and_the_service(world, installed):
    installation, kb = installed
    ingest(kb)
    assert Chunk.objects.filter(knowledge_base=kb).exists()

    kept = uninstall(installation)

    assert kept == ["datasets:qa-handbook"]
    assert not KnowledgeBase.objects.exists()
    assert not Document.objects.exists()
    assert not Chunk.objects.exists()
    assert not InferenceService.objects.filter(project=world.project_a).exists()


def test_what_it_will_create_names_the_base_its_documents_and_its_service():
    lines = dict(plan(builtin_version("document-qa")))
    assert lines["knowledge_bases"] == (
        "Knowledge base “document-qa” over the files of dataset “document-qa-handbook”, answered by “document-qa-chat”"
    )
    assert lines["services"] == (
        "Inference service “document-qa-chat” serving the packaged chat model (SmolLM2-135M-Instruct)"
    )


def kb_entry(**overrides):
    return {"name": "{{ install }}-kb", "files": ["docs/a.md"], "service": "{{ install }}-chat", **overrides}


def chat_service(**overrides):
    return {"name": "{{ install }}-chat", "framework": "llm", "memory": "2Gi", **overrides}


def bundle_with(kb=None, service=None, files=None, version="1.0.0"):
    data = manifest(
        services=[service or chat_service()],
        knowledge_bases=[kb or kb_entry()],
    )
    data["metadata"]["version"] = version
    import yaml

    entries = {"app.yaml": yaml.safe_dump(data).encode(), "README.md": b"# KB"}
    entries.update(files if files is not None else {"docs/a.md": b"# A\n\nThe answer is forty-two.\n"})
    return bundles.from_entries(entries)


def test_bundle_files_become_documents_named_below_strip(world):
    bundle = bundle_with(kb=kb_entry(files=["docs/a.md"], strip="docs/", dataset=""))

    installation = install(add_version(bundle), world.project_a, world.alice, name="t")

    [kb] = installation.objects_of("knowledge_bases")
    [doc] = kb.documents.all()
    assert (doc.name, doc.source, kb.llm_service.name) == ("a.md", "app:t", "t-chat")
    ingest(kb)
    assert "forty-two" in knowledge.query(kb, "What is the answer?").passages[0].chunk.text


def test_a_broken_entry_is_refused_with_its_fields_paths():
    broken = manifest(
        services=[chat_service(), {"name": "plain"}],
        knowledge_bases=[
            {"name": "a", "service": "plain", "colour": "red", "tags": "x"},
            {"files": ["docs/missing.md"], "dataset": 3},
        ],
    )

    with pytest.raises(ValidationError) as caught:
        validate_manifest(broken, files={"docs/a.md"})

    assert set(caught.value.message_dict) == {
        "spec.services[1].model",  # only the packaged chat model (framework llm) serves without one
        "spec.knowledge_bases[0].colour",
        "spec.knowledge_bases[0].files",  # no documents at all
        "spec.knowledge_bases[0].tags",
        "spec.knowledge_bases[0].service",  # not a chat model
        "spec.knowledge_bases[1].name",
        "spec.knowledge_bases[1].files[0]",
        "spec.knowledge_bases[1].dataset",
    }


def test_a_service_that_is_no_chat_model_is_refused_at_install(world):
    iris = InferenceService.objects.create(project=world.project_a, name="iris", framework="sklearn")
    bundle = bundle_with(kb=kb_entry(service=iris.name))

    with pytest.raises(ValidationError) as caught:
        install(add_version(bundle), world.project_a, world.alice, name="t")

    assert list(caught.value.message_dict) == ["spec.knowledge_bases[0].service"]
    assert not KnowledgeBase.objects.exists()
    assert InferenceService.objects.filter(project=world.project_a).count() == 1


def test_an_unreadable_bundle_file_is_refused_at_its_path(world):
    bundle = bundle_with(kb=kb_entry(files=["docs/a.bin"]), files={"docs/a.bin": b"\x00\x01"})

    with pytest.raises(ValidationError) as caught:
        install(add_version(bundle), world.project_a, world.alice, name="t")

    assert list(caught.value.message_dict) == ["spec.knowledge_bases[0].files[0]"]
    assert not Installation.objects.exists()
    assert not KnowledgeBase.objects.exists()


def test_the_tiny_bundle_with_a_knowledge_base_over_its_own_dataset(world):
    bundle = tiny_bundle(knowledge_bases=[{"name": "{{ install }}", "dataset": "{{ install }}-data"}])

    installation = install(add_version(bundle), world.project_a, world.alice, name="t")

    [kb] = installation.objects_of("knowledge_bases")
    assert (kb.llm_service, list(kb.documents.values_list("name", flat=True))) == (None, ["rows.csv"])


def test_the_installation_page_links_the_chat_page_instead_of_a_try_it_form(world, installed, client):
    installation, kb = installed
    client.force_login(world.bob)

    page = client.get(f"/p/project-a/apps/installed/{installation.pk}/")

    assert page.status_code == 200
    html = page.content.decode()
    assert f"/p/project-a/knowledge/{kb.pk}/chat/" in html
    assert f"/apps/installed/{installation.pk}/try/" not in html
    tried = client.get(f"/p/project-a/apps/installed/{installation.pk}/try/")
    assert tried.status_code == 200
    assert "This app has no service to try." in tried.content.decode()


def test_an_upgrade_that_replaces_the_chat_service_keeps_the_base_answered_by_it(world):
    from apps.appstore.services import upgrade

    first = add_version(bundle_with())
    installation = install(first, world.project_a, world.alice, name="t")
    [kb] = installation.objects_of("knowledge_bases")
    second = add_version(bundle_with(service=chat_service(memory="3Gi"), version="1.1.0"))

    upgrade(installation, second, world.alice)

    [service] = installation.objects_of("services")
    assert service.memory_bytes == 3 * 2**30
    kb.refresh_from_db()
    assert kb.llm_service == service
    assert InferenceService.objects.filter(project=world.project_a).count() == 1
