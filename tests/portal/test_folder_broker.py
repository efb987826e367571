"""The embedded broker (portal/lib/folderbroker.py): a consumer never reads a half-written message, and a message file
it cannot read is moved aside instead of ending consumption (issue 17.22, kombu#1551). Real files, real kombu
connections, a writer in another process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings
from kombu import Connection

from portal.celery import app as celery_app
from portal.lib.folderbroker import CORRUPT, Transport

pytestmark = pytest.mark.smoke

MESSAGES = 150
BODY_BYTES = 256 * 1024  # a write of this size takes long enough for a busy reader to land inside it


def options(folder: Path) -> dict[str, object]:
    (folder / "queue").mkdir(parents=True, exist_ok=True)
    (folder / "control").mkdir(exist_ok=True)
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
        "polling_interval": 0,  # the reader lists the folder as fast as it can
    }


WRITER = """
import sys
from kombu import Connection
from portal.lib.folderbroker import Transport

folder_options = {options!r}
with Connection("filesystem://", transport=Transport, transport_options=folder_options) as conn:
    queue = conn.SimpleQueue("race")
    for index in range({messages}):
        queue.put({{"index": index, "fill": "x" * {body_bytes}}})
    queue.close()
"""


def test_a_reader_racing_a_writer_never_sees_a_partial_message(tmp_path):
    folder_options = options(tmp_path)
    code = textwrap.dedent(WRITER).format(options=folder_options, messages=MESSAGES, body_bytes=BODY_BYTES)
    received: list[int] = []
    with Connection("filesystem://", transport=Transport, transport_options=folder_options) as conn:
        queue = conn.SimpleQueue("race")
        # The reader is already polling the folder when the writer starts.
        with pytest.raises(queue.Empty):
            queue.get(block=False)
        writer = subprocess.Popen([sys.executable, "-c", code], cwd=settings.BASE_DIR)
        try:
            while len(received) < MESSAGES:
                try:
                    message = queue.get(block=True, timeout=0.05)
                except queue.Empty:
                    assert writer.poll() in (None, 0), "the writer failed"
                    continue
                body = message.payload
                assert body["fill"] == "x" * BODY_BYTES, f"message {body['index']} arrived cut short"
                received.append(body["index"])
                message.ack()
        finally:
            writer.wait(timeout=60)
        queue.close()
    assert writer.returncode == 0
    assert sorted(received) == list(range(MESSAGES))
    assert not (tmp_path / "queue" / CORRUPT).exists()  # nothing was ever unreadable
    leftovers = [p.name for p in (tmp_path / "queue").iterdir() if p.is_file()]
    assert leftovers == []  # no temporary file stays behind


def test_an_unreadable_message_file_is_moved_aside_and_consumption_goes_on(tmp_path, caplog):
    folder_options = options(tmp_path)
    queue_folder = tmp_path / "queue"
    # What a crashed writer or kombu's own non-atomic write leaves: an empty file, cut JSON, JSON that is no message
    # ("0_…" sorts before any real message name, "<monotonic ms>_<uuid>.<queue>.msg": they are read first).
    (queue_folder / "0_a.jobs.msg").write_bytes(b"")
    (queue_folder / "0_b.jobs.msg").write_bytes(b'{"body": "eyJh')
    (queue_folder / "0_c.jobs.msg").write_bytes(b"[1, 2]")
    caplog.set_level(logging.WARNING, logger="portal.lib.folderbroker")
    with Connection("filesystem://", transport=Transport, transport_options=folder_options) as conn:
        queue = conn.SimpleQueue("jobs")
        queue.put({"task": "after the broken ones"})
        message = queue.get(block=True, timeout=5)
        assert message.payload == {"task": "after the broken ones"}
        message.ack()
        queue.close()
    moved = sorted(p.name for p in (queue_folder / CORRUPT).iterdir())
    assert moved == ["0_a.jobs.msg", "0_b.jobs.msg", "0_c.jobs.msg"]
    assert (queue_folder / CORRUPT / "0_b.jobs.msg").read_bytes() == b'{"body": "eyJh'  # kept for a look
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "0_a.jobs.msg" in warnings[0]


def test_a_binding_table_is_never_seen_empty(tmp_path):
    """Fanout (Celery's broadcast and events) keeps a table of bound queues per exchange; it is made whole."""
    folder_options = options(tmp_path)
    with Connection("filesystem://", transport=Transport, transport_options=folder_options) as conn:
        channel = conn.default_channel
        channel._queue_bind("events", "", "", "first")
        table = tmp_path / "control" / "events.exchange"
        assert json.loads(table.read_text()) == [["", "", "first"]]
        channel._queue_bind("events", "", "", "second")
        assert [row[2] for row in channel.get_table("events")] == ["second", "first"]
    assert [p.name for p in (tmp_path / "control").iterdir()] == ["events.exchange"]


@pytest.mark.skipif(bool(settings.REDIS_URL), reason="the embedded broker is used without REDIS_URL")
def test_the_embedded_celery_app_uses_it():
    with celery_app.connection_for_write() as conn:
        assert conn.transport_cls == "portal.lib.folderbroker:Transport"
        assert isinstance(conn.transport, Transport)
