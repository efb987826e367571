"""What the local agent makes of a task's raw output: lines split on newlines across reads, CRLF endings,
a last line without a newline, stderr apart from stdout, and an endless line cut into bounded pieces."""

from __future__ import annotations

import pytest

from apps.jobs.logs import MAX_LINE_BYTES
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from tests.factories import ProjectFactory, UserFactory, pipeline
from tests.jobs.conftest import drive

pytestmark = [pytest.mark.live]

CODE = r"""
import os, sys, time
out = sys.stdout.buffer
out.write(b"first\r\nsecond half-")
out.flush()
time.sleep(0.2)  # the rest of the line arrives in another read
out.write(b"written\n" + b"x" * 200_000 + b"\n")
out.flush()
sys.stderr.write("to stderr\n")
sys.stderr.flush()
out.write("ünïcode".encode() + b" \xff\n")
out.write(b"no newline at the end")
"""


def test_the_agent_stores_each_line_of_raw_output(agent, transactional_db):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    run = drive(start_run(pipeline(project, owner, [{"name": "emit", "args": {"code": CODE}}]), owner))
    assert run.status == "succeeded", run.reason
    rows = list(LogLine.objects.filter(run=run).order_by("seq").values_list("stream", "text"))
    stdout = [text for stream, text in rows if stream == "stdout"]
    assert stdout[:2] == ["first", "second half-written"]
    # 200,000 characters: cut into pieces of about 64 KiB (the agent's bound: where depends on how the pipe
    # was read), each stored up to MAX_LINE_BYTES
    pieces = stdout[2:-2]
    assert 3 <= len(pieces) <= 4
    assert all(set(p) == {"x"} for p in pieces)
    assert [len(p) for p in pieces[:3]] == [MAX_LINE_BYTES] * 3
    assert stdout[-2:] == ["ünïcode \ufffd", "no newline at the end"]
    assert [text for stream, text in rows if stream == "stderr"] == ["to stderr"]
