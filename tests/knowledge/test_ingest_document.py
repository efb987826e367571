"""Ingestion: extraction per file type, heading-aware chunks with offsets, versions by digest, failures alone."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import ValidationError

from apps.knowledge import services
from apps.knowledge.models import Chunk, Document
from apps.outbox.models import PendingTask
from tests.knowledge.factories import HANDBOOK, ingested, knowledge_base

pytestmark = pytest.mark.django_db


def test_it_chunks_markdown_with_heading_paths_and_offsets(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    assert doc.status == Document.Status.READY
    chunks = list(doc.chunks.all())
    assert doc.chunk_count == len(chunks) > 0
    text = HANDBOOK.decode()
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert chunk.vector().shape == (256,)
    rollback = next(c for c in chunks if "roll back" in c.text)
    assert rollback.heading_path == ["Handbook", "Deploying", "Rollback"]
    tests = next(c for c in chunks if "make test" in c.text)
    assert tests.heading_path == ["Handbook", "Running the tests"]


def test_adding_a_document_queues_its_ingestion(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc, changed = services.add_document(kb, world.alice, "notes.txt", b"some notes")
    assert changed
    assert doc.status == Document.Status.PENDING
    assert PendingTask.objects.filter(name="apps.knowledge.tasks.ingest_document", args=[doc.pk]).exists()


def test_the_same_content_is_not_a_new_version(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    again, changed = services.add_document(kb, world.alice, "handbook.md", HANDBOOK)
    assert not changed
    assert again.pk == doc.pk
    assert again.version == 1
    assert again.status == Document.Status.READY


def test_reingesting_a_changed_file_replaces_its_chunks(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    old_ids = set(doc.chunks.values_list("pk", flat=True))
    changed = ingested(kb, data=b"# Handbook\n\nEverything moved to the wiki about llamas.\n")
    assert changed.pk == doc.pk
    assert changed.version == 2
    chunks = list(changed.chunks.all())
    assert not old_ids & {c.pk for c in chunks}
    assert [c.text for c in chunks] == ["# Handbook\n\nEverything moved to the wiki about llamas."]
    assert not Chunk.objects.filter(text__contains="make test").exists()


def test_deleting_a_document_removes_its_chunks(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    services.delete_document(doc)
    assert not Chunk.objects.filter(knowledge_base=kb).exists()


def test_a_bad_file_fails_alone_with_a_reason(world):
    kb = knowledge_base(world.project_a, world.alice)
    bad = ingested(kb, name="broken.pdf", data=b"%PDF-1.4 this is not a pdf")
    binary = ingested(kb, name="blob.txt", data=b"\xff\xfe\x00\x01garbage")
    good = ingested(kb)
    assert bad.status == binary.status == Document.Status.FAILED
    assert "PDF" in bad.reason
    assert bad.chunk_count == 0
    assert "UTF-8" in binary.reason
    assert good.status == Document.Status.READY
    assert good.chunks.exists()


def test_a_second_run_of_the_task_does_nothing(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb)
    ids = list(doc.chunks.values_list("pk", flat=True))
    assert services.ingest_document(doc.pk) is None
    assert list(doc.chunks.values_list("pk", flat=True)) == ids


def test_html_headings_become_the_heading_path(world):
    kb = knowledge_base(world.project_a, world.alice)
    html = (
        b"<html><head><style>p{}</style></head><body>"
        b"<h1>Guide</h1><p>Intro.</p><h2>Setup</h2><p>Install it.</p></body></html>"
    )
    doc = ingested(kb, name="guide.html", data=html)
    setup = next(c for c in doc.chunks.all() if "Install it." in c.text)
    assert setup.heading_path == ["Guide", "Setup"]
    assert "p{}" not in "".join(doc.chunks.values_list("text", flat=True))


def test_csv_rows_keep_their_column_names(world):
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb, name="people.csv", data=b"name,team\nAda,compilers\nGrace,navy\n")
    assert "name: Ada; team: compilers" in doc.chunks.get().text


def test_pdf_pages_are_recorded(world):
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    for word in ("alpha", "omega"):
        page = writer.add_blank_page(width=300, height=300)
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 12 Tf 20 200 Td (Page about {word}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
    buf = io.BytesIO()
    writer.write(buf)
    kb = knowledge_base(world.project_a, world.alice)
    doc = ingested(kb, name="two.pdf", data=buf.getvalue())
    assert doc.status == Document.Status.READY, doc.reason
    pages = {c.page for c in doc.chunks.all()}
    texts = " ".join(doc.chunks.values_list("text", flat=True))
    assert "alpha" in texts
    assert "omega" in texts
    assert pages <= {1, 2}
    assert 1 in pages


@pytest.mark.parametrize(
    ("name", "data", "field"),
    [("x.exe", b"MZ", "file"), ("empty.md", b"", "file"), ("", b"x", "name")],
)
def test_it_refuses_bad_uploads_with_field_errors(world, name, data, field):
    kb = knowledge_base(world.project_a, world.alice)
    with pytest.raises(ValidationError) as exc:
        services.add_document(kb, world.alice, name, data)
    assert field in exc.value.message_dict
    assert not Document.objects.exists()
