"""Ingestion progress reaches the project's live events socket (the documents table re-draws on each event)."""

from __future__ import annotations

import pytest

from apps.knowledge import services
from tests.knowledge.factories import HANDBOOK, knowledge_base
from tests.projects.test_events_ws import joined, open_socket, receive

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_member_hears_a_document_go_from_ingesting_to_ready(live_asgi, world):
    kb = knowledge_base(world.project_a, world.alice)
    doc, _changed = services.add_document(kb, world.alice, "handbook.md", HANDBOOK)
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        services.ingest_document(doc.pk)
        events = [receive(ws)]
        while events[-1].get("status") != "ready":
            events.append(receive(ws))
    assert {e["type"] for e in events} == {"document"}
    assert {e["id"] for e in events} == {doc.pk}
    assert events[0]["status"] == "ingesting"
    assert events[0]["progress"] == 0
    assert events[-1]["progress"] == 100


def test_a_failure_is_heard_with_its_status(live_asgi, world):
    kb = knowledge_base(world.project_a, world.alice)
    doc, _changed = services.add_document(kb, world.alice, "broken.pdf", b"%PDF-1.4 nope")
    with open_socket(live_asgi, user=world.bob) as ws:
        joined(ws)
        services.ingest_document(doc.pk)
        events = [receive(ws)]
        while events[-1].get("status") == "ingesting":
            events.append(receive(ws))
    assert events[-1]["status"] == "failed"
