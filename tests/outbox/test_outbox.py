"""apps.outbox: a task queued in a transaction is sent after its commit, kept while the broker is down, and sent
by the drain once it is back; never sent for a transaction that rolled back, never held back by a bad row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs.tasks import advance_run
from apps.outbox import services
from apps.outbox.models import PendingTask
from portal.celery import app
from tests.outbox.conftest import broker_down

pytestmark = pytest.mark.django_db


def received(limit: int = 10) -> list[tuple[str, list, str | None]]:
    """(task name, args, eta) of the messages waiting in the default queue of the broker this process sends to."""
    messages = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.conf.task_default_queue)
        try:
            while len(messages) < limit:
                try:
                    message = queue.get(timeout=1)
                except queue.Empty:
                    break
                args, _kwargs, _embed = message.decode()
                messages.append((message.headers["task"], list(args), message.headers.get("eta")))
                message.ack()
        finally:
            queue.close()
    return messages


def test_a_task_queued_in_a_transaction_is_sent_when_it_commits(private_broker, django_capture_on_commit_callbacks):
    with private_broker.up():
        with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
            services.enqueue(advance_run, 7)
            assert received() == []  # not before the commit
        assert len(callbacks) == 1
        assert received() == [("apps.jobs.tasks.advance_run", [7], None)]
    assert not PendingTask.objects.exists()


def test_nothing_is_sent_for_a_transaction_that_rolled_back(private_broker, django_capture_on_commit_callbacks):
    def failed_write() -> None:
        with transaction.atomic():
            services.enqueue(advance_run, 7)
            raise RuntimeError("the write failed")

    with private_broker.up():
        with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(RuntimeError):
            failed_write()
        assert callbacks == []
        assert services.drain() == 0
        assert received() == []
    assert not PendingTask.objects.exists()


def test_a_countdown_becomes_an_eta_kept_through_an_outage(private_broker, django_capture_on_commit_callbacks):
    before = timezone.now()
    with broker_down(), django_capture_on_commit_callbacks(execute=True):
        services.enqueue(advance_run, 1, countdown=120)
    row = PendingTask.objects.get()
    assert before + timedelta(seconds=119) < row.eta < timezone.now() + timedelta(seconds=121)
    PendingTask.objects.update(due_at=timezone.now())
    with private_broker.up():
        assert services.drain() == 1
        [(_name, _args, eta)] = received()
    assert eta == row.eta.isoformat()


def test_the_broker_being_down_keeps_the_row_and_the_drain_stops_at_the_first_refusal(
    private_broker, django_capture_on_commit_callbacks
):
    with broker_down():
        with django_capture_on_commit_callbacks(execute=True):
            first = services.enqueue(advance_run, 1)
        second = services.enqueue(advance_run, 2)  # outside a transaction: sent at once, refused too
        first.refresh_from_db()
        assert first.attempts == 1
        assert "refused" in first.last_error.lower()
        assert first.due_at <= timezone.now()  # due again at once: the next drain tries it
        PendingTask.objects.filter(pk=second.pk).update(attempts=0, due_at=timezone.now())

        assert services.drain() == 0
        counts = dict(PendingTask.objects.values_list("pk", "attempts"))
        assert counts == {first.pk: 2, second.pk: 0}  # one try reached the broker, the other was not wasted

    with private_broker.up():
        assert services.drain() == 2
        assert sorted(args for _name, args, _eta in received()) == [[1], [2]]
    assert not PendingTask.objects.exists()


def test_the_drain_leaves_rows_whose_writer_still_owns_them(private_broker):
    with transaction.atomic():  # its commit is the test's, never run: the writer has not sent it yet
        row = services.enqueue(advance_run, 1)
    with private_broker.up():
        assert services.drain() == 0
        PendingTask.objects.filter(pk=row.pk).update(due_at=timezone.now() - timedelta(seconds=1))  # lease over
        assert services.drain() == 1
        assert received() == [("apps.jobs.tasks.advance_run", [1], None)]


def test_a_row_the_broker_cannot_take_waits_without_holding_back_the_others(private_broker):
    now = timezone.now()
    bad = PendingTask.objects.create(name="apps.nowhere.tasks.gone", args=[], due_at=now - timedelta(seconds=2))
    PendingTask.objects.create(name=advance_run.name, args=[3], due_at=now - timedelta(seconds=1))
    with private_broker.up():
        assert services.drain() == 1
        assert received() == [("apps.jobs.tasks.advance_run", [3], None)]
    bad.refresh_from_db()
    assert bad.attempts == 1
    assert "apps.nowhere.tasks.gone" in bad.last_error
    assert bad.due_at >= timezone.now() + services.RETRY_BACKOFF - timedelta(seconds=5)


def test_tasks_queued_together_are_sent_after_the_commit_with_one_claim_and_one_delete(
    private_broker, django_capture_on_commit_callbacks
):
    def statements_after_commit(n: int) -> int:
        with private_broker.up():
            with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
                rows = services.enqueue_many(advance_run, [(i,) for i in range(n)])
            assert len(rows) == n
            assert len(callbacks) == 1
            with CaptureQueriesContext(connection) as queries:
                callbacks[0]()
            assert sorted(args for _name, args, _eta in received()) == [[i] for i in range(n)]
        assert not PendingTask.objects.exists()
        return len(queries)

    # The claim and the delete, each in a savepoint of the test's transaction (after a real commit: each in a
    # transaction of its own, with its SET LOCAL on PostgreSQL), however many rows.
    assert statements_after_commit(1) == statements_after_commit(5) == 6


def test_rows_queued_together_that_a_drain_took_over_are_left_to_it(private_broker, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        first, _second = services.enqueue_many(advance_run, [(1,), (2,)])
    # The writer's transaction outlasted the lease: a drain took the first row (and is sending it).
    PendingTask.objects.filter(pk=first.pk).update(due_at=timezone.now() + timedelta(minutes=1))
    with private_broker.up():
        callbacks[0]()
        assert received() == [("apps.jobs.tasks.advance_run", [2], None)]
    assert list(PendingTask.objects.values_list("pk", flat=True)) == [first.pk]


def test_rows_queued_together_while_the_broker_is_down_are_all_kept_for_the_drain(
    private_broker, django_capture_on_commit_callbacks
):
    with broker_down(), django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        services.enqueue_many(advance_run, [(1,), (2,), (3,)])
    rows = list(PendingTask.objects.order_by("pk"))
    assert [r.attempts for r in rows] == [1, 0, 0]  # one try reached for the broker; the others were not wasted
    assert all(r.due_at <= timezone.now() for r in rows)  # due again at once
    with private_broker.up():
        assert services.drain() == 3
        assert sorted(args for _name, args, _eta in received()) == [[1], [2], [3]]
