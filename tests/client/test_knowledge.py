"""Knowledge bases from the SDK and `portal knowledge`: create, upload (ingested by the live worker), query, chat
streamed to the terminal; another tenant's base is not found, bad input is a 400 by field."""

from __future__ import annotations

import json

import pytest
from portal_client import BadRequest, NotFound

from tests.client.expect import fails
from tests.client.test_cli import logged_in  # noqa: F401 - fixture
from tests.factories import make_token
from tests.knowledge.factories import HANDBOOK, knowledge_base
from tests.knowledge.test_chat import closed_port
from tests.serving.llm import llm_server  # noqa: F401 - the session's model server (SmolLM2, real)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_create_upload_query_and_chat_from_the_command_line(logged_in, cli, tmp_path, llm_server, settings):  # noqa: F811
    settings.PORTAL_KNOWLEDGE_MAX_TOKENS = 24  # a short answer: the test is about the wiring, not the prose
    made = cli("knowledge", "create", "handbook", "-p", "project-a", "--description", "team docs",
               "--llm-url", f"{llm_server.url}/v1", "--llm-model", llm_server.name, "-o", "json")  # fmt: skip
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["name"] == "handbook"
    source = tmp_path / "handbook.md"
    source.write_bytes(HANDBOOK)

    uploaded = cli("knowledge", "upload", "project-a/handbook", str(source), "--tag", "ops", "--wait", "-o", "json")
    assert uploaded.exit_code == 0, uploaded.output
    [doc] = json.loads(uploaded.stdout)
    assert (doc["name"], doc["status"], doc["tags"], doc["version"]) == ("handbook.md", "ready", ["ops"], 1)
    assert doc["chunk_count"] >= 2

    query = cli("knowledge", "query", "project-a/handbook", "how do I roll back a deployment", "-k", "2")
    assert query.exit_code == 0, query.output
    assert query.stdout.splitlines()[0].split() == ["NUMBER", "DOCUMENT_NAME", "SCORE", "TEXT"]
    assert "handbook.md" in query.stdout
    assert "roll back" in query.stdout

    chat = cli("knowledge", "chat", "project-a/handbook", "How do I run the tests?")
    assert chat.exit_code == 0, chat.output
    assert chat.stdout.strip()  # the model's streamed words
    assert "[1] handbook.md" in chat.stderr  # then the passages it was given
    unknown = cli("knowledge", "chat", "project-a/handbook", "what is the capital of Mongolia")
    assert unknown.stdout.strip() == "Not found in the knowledge base."
    listed = cli("knowledge", "list", "--json")
    assert [(kb["name"], kb["document_count"]) for kb in json.loads(listed.stdout)] == [("handbook", 1)]


def test_the_sdk_streams_chat_events_and_errors_are_clear(portal, tmp_path):
    kb = knowledge_base(portal.world.project_b, portal.world.charlie, name="secret",
                        llm_url=f"http://127.0.0.1:{closed_port()}/v1", llm_model="smollm2")  # fmt: skip
    source = tmp_path / "notes.md"
    source.write_bytes(HANDBOOK)
    with portal.client(portal.world.charlie) as charlie:
        doc = charlie.knowledge.upload(kb.pk, source)
        assert (doc.name, doc.version) == ("notes.md", 1)
        assert charlie.knowledge.upload(kb.pk, source).version == 1  # same content: no new version
        [ready] = charlie.knowledge.wait_ingested(kb.pk)
        assert ready.status == "ready"
        hits = charlie.knowledge.query("project-b/secret", "how do I roll back a deployment", k=1)
        assert hits["not_found"] is False
        assert "roll back" in hits["passages"][0]["text"]
        events = list(charlie.knowledge.chat_stream(kb.pk, "who won the 1998 world cup"))
        assert [e.event for e in events] == ["passages", "token", "done"]
        assert events[0].data["not_found"] is True
        assert events[1].data == "Not found in the knowledge base."

    with portal.client() as alice:
        with pytest.raises(NotFound):
            alice.knowledge.get(kb.pk)  # another tenant's base
        with pytest.raises(NotFound):
            alice.knowledge.query("project-b/secret", "anything")
        alice.knowledge.create("project-a", "mine")
        with pytest.raises(BadRequest) as bad:
            alice.knowledge.query("project-a/mine", "x", k=0)
        assert "k" in bad.value.errors


def test_command_line_errors_exit_with_their_codes(logged_in, cli, tmp_path):  # noqa: F811
    assert cli("knowledge", "get", "project-b/secret").exit_code == 6
    assert cli("knowledge", "create", "handbook").exit_code == 2  # no project
    assert cli("knowledge", "create", "handbook", "-p", "project-a").exit_code == 0
    again = cli("knowledge", "create", "handbook", "-p", "project-a")
    assert again.exit_code == 2
    assert again.stderr.startswith("Error (400): ")
    assert "Traceback" not in again.output
    assert json.loads(cli("knowledge", "get", "handbook", "-p", "project-a", "--json").stdout)["name"] == "handbook"
    fails(cli("knowledge", "list", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")

    source = tmp_path / "handbook.md"
    source.write_bytes(HANDBOOK)
    fails(cli("knowledge", "upload", "project-a/none", str(source)), 6, "No knowledge base “none”")
    fails(cli("knowledge", "upload", "project-a/handbook", str(tmp_path / "missing.md")), 2, "does not exist")
    assert cli("knowledge", "upload", "project-a/handbook", str(source), "--wait").exit_code == 0
    documents = cli("knowledge", "documents", "project-a/handbook")
    assert documents.stdout.splitlines()[0].split() == ["ID", "NAME", "KIND", "VERSION", "STATUS", "CHUNK_COUNT"]
    assert "handbook.md" in documents.stdout
    fails(cli("knowledge", "documents", "project-b/secret"), 6)
    fails(cli("knowledge", "query", "project-a/handbook", "roll back", "-k", "0"), 2, "Error (400): ", "k")
    fails(cli("knowledge", "chat", "project-a/handbook", "How do I roll back?"), 2, "Error (400): ")

    as_charlie = {"PORTAL_TOKEN": make_token(logged_in.world.charlie)}
    fails(cli("knowledge", "delete", "project-a/handbook", env=as_charlie), 6)
    gone = cli("knowledge", "delete", "project-a/handbook")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted knowledge base project-a/handbook.")
    fails(cli("knowledge", "delete", "project-a/handbook"), 6)
