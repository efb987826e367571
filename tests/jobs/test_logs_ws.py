"""A run's live log over a real websocket, served by uvicorn through the real channel layer."""

from __future__ import annotations

import json
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.jobs.consumers import LogFilter
from apps.jobs.logs import LogWriter, row_dict, run_log_group
from apps.jobs.models import LogLine, PipelineRun, TaskRun

pytestmark = [pytest.mark.live, pytest.mark.smoke, pytest.mark.django_db(transaction=True, databases="__all__")]


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def open_socket(live, run, user=None, query: str = ""):
    headers = {"Origin": live.url}
    if user is not None:
        headers["Cookie"] = session_cookie(user)
    url = f"{live.ws_url}/ws/runs/{run if isinstance(run, int) else run.pk}/logs/" + (f"?{query}" if query else "")
    return connect(url, additional_headers=headers, open_timeout=30, max_size=None)


def receive(ws, timeout: float = 10.0, *, statuses: bool = False) -> dict:
    """The next message; the status snapshot a socket gets after its backlog is skipped unless asked for."""
    while True:
        message = json.loads(ws.recv(timeout=timeout))
        if statuses or message["type"] != "status":
            return message


def rows_of(message: dict) -> list[dict]:
    """The lines of a "lines" message (rows in apps.jobs.logs.ROW_FIELDS order) as dicts."""
    assert message["type"] == "lines", message
    return [row_dict(row) for row in message["rows"]]


def receive_rows(ws, timeout: float = 10.0) -> list[dict]:
    return rows_of(receive(ws, timeout))


def assert_quiet(ws, seconds: float = 0.5) -> None:
    """No further lines arrive (status snapshots may)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = json.loads(ws.recv(timeout=left))
        except TimeoutError:
            return
        assert message["type"] == "status", message


def receive_lines(ws, count: int, timeout: float = 20.0) -> list[dict]:
    """Exactly `count` lines, then nothing more for a moment (no duplicates on the way)."""
    lines: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(lines) < count:
        message = receive(ws, timeout=max(0.1, deadline - time.monotonic()))
        lines.extend(rows_of(message))
    assert len(lines) == count, [line["seq"] for line in lines]
    assert_quiet(ws)
    return lines


@pytest.fixture
def run(world) -> PipelineRun:
    return PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=1)


@pytest.fixture
def task(run) -> TaskRun:
    return TaskRun.objects.create(run=run, node="fit")


def write(task: TaskRun, texts: list[str], replica: str = "0") -> None:
    with LogWriter(task) as writer:
        for text in texts:
            writer.write(replica, "stdout", text)


def test_backlog_then_live_lines_arrive_in_order_without_gaps_or_duplicates(live_asgi, world, task):
    total, before = 2400, 600
    write(task, [f"line {i}" for i in range(before)])
    halfway = threading.Event()
    errors: list[BaseException] = []

    def keep_writing() -> None:
        try:
            with LogWriter(task) as writer:
                for i in range(before, total):
                    writer.write(str(i % 2), "stdout", f"line {i}")
                    if i == before + 300:
                        halfway.set()
                    if i % 10 == 0:
                        time.sleep(0.005)  # ~1 s of writing: the socket connects in the middle of it
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            halfway.set()
            connection.close()

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        assert halfway.wait(timeout=20)
        with open_socket(live_asgi, task.run, world.bob) as ws:
            assert writer.is_alive(), "the writer finished before the socket connected"
            lines = receive_lines(ws, total)
    finally:
        writer.join(timeout=30)
    assert not errors
    assert [line["seq"] for line in lines] == list(range(1, total + 1))
    assert [line["text"] for line in lines] == [f"line {i}" for i in range(total)]
    assert [line["id"] for line in lines] == list(
        LogLine.objects.filter(run=task.run).order_by("pk").values_list("pk", flat=True)
    )


def test_after_resumes_from_the_last_line_the_browser_has(live_asgi, world, task):
    write(task, [f"old {i}" for i in range(10)])
    last_seen = LogLine.objects.get(task=task, seq=6).pk
    with open_socket(live_asgi, task.run, world.alice, f"after={last_seen}") as ws:
        assert [line["text"] for line in receive_lines(ws, 4)] == ["old 6", "old 7", "old 8", "old 9"]
        write(task, ["new 1", "new 2"])
        assert [line["text"] for line in receive_rows(ws)] == ["new 1", "new 2"]


def test_the_task_and_replica_filters_apply_to_backlog_and_live_lines(live_asgi, world, run, task):
    other = TaskRun.objects.create(run=run, node="eval")
    write(task, ["fit 1"])
    write(other, ["eval 1"])
    write(task, ["fit 2 on replica 1"], replica="1")
    with open_socket(live_asgi, run, world.bob, f"task={task.pk}") as ws:
        assert [line["text"] for line in receive_rows(ws)] == ["fit 1", "fit 2 on replica 1"]
        write(other, ["eval 2"])  # published first, filtered out
        write(task, ["fit 3"])
        message = receive(ws)
        assert [line["text"] for line in rows_of(message)] == ["fit 3"]
    with open_socket(live_asgi, run, world.bob, f"task={task.pk},{other.pk}&replica=1") as ws:
        assert [line["text"] for line in receive_rows(ws)] == ["fit 2 on replica 1"]


def test_a_socket_gets_the_run_state_after_the_backlog(live_asgi, world, run):
    with open_socket(live_asgi, run, world.bob) as ws:
        snapshot = receive(ws, statuses=True)
    assert snapshot == {
        "type": "status", "run": run.pk, "status": "queued", "reason": "", "done": 0, "total": 0, "nodes": {},
    }  # fmt: skip


def test_run_status_messages_are_forwarded(live_asgi, world, run):
    with open_socket(live_asgi, run, world.bob) as ws:
        assert receive(ws, statuses=True)["status"] == "queued"  # the snapshot: connected and in the group
        async_to_sync(get_channel_layer().group_send)(
            run_log_group(run.pk), {"type": "run.status", "run": run.pk, "status": "running", "done": 1, "total": 3}
        )
        assert receive(ws, statuses=True) == {
            "type": "status", "run": run.pk, "status": "running", "done": 1, "total": 3,
        }  # fmt: skip


@pytest.mark.parametrize("who", ["charlie", "nobody's run"])
def test_a_run_outside_my_projects_is_closed_with_4404(live_asgi, world, run, who):
    run_id = run.pk if who == "charlie" else run.pk + 1000
    with open_socket(live_asgi, run_id, world.charlie) as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4404


def test_anonymous_socket_is_closed_with_4401(live_asgi, run):
    with open_socket(live_asgi, run) as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4401


def test_a_malformed_filter_is_closed_with_4400(live_asgi, world, run):
    with open_socket(live_asgi, run, world.alice, "task=abc") as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4400


def test_the_filter_reads_repeated_and_comma_separated_tasks():
    parsed = LogFilter.from_query_string(b"after=12&task=1,2&task=3&replica=worker-0")
    assert parsed == LogFilter(after=12, task_ids=frozenset({1, 2, 3}), replica="worker-0")
    assert LogFilter.from_query_string(b"") == LogFilter()
    for bad in (b"after=-1", b"after=x", b"task=1,x"):
        with pytest.raises(ValueError):  # noqa: PT011 - int() and the negative check both say ValueError
            LogFilter.from_query_string(bad)
