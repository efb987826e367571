"""How the local agent records ends and tells listeners (apps/runtime/local/notifier.py), and how what the agent's
own process submits is taken without a claim (LocalRuntime.submit_many with an agent running here)."""

from __future__ import annotations

import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.runtime import hooks
from apps.runtime.local import agent as agent_module
from apps.runtime.local.agent import LocalAgent
from apps.runtime.local.notifier import End, Notice, Notifier
from apps.runtime.local.runtime import LocalRuntime
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import Phase, Status, Workload

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder(hooks.Listener):
    """A listener that notes what it heard and in which transaction state the workload rows were."""

    def __init__(self, fail: bool = False) -> None:
        self.heard: list[tuple[str, Phase, str]] = []
        self.fail = fail

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        state = LocalWorkload.objects.values_list("state", flat=True).get(uid=workload.uid)
        self.heard.append((workload.uid, phase, state))


class BatchRecorder(Recorder):
    batches_with_ends = True

    def __init__(self, fail: bool = False) -> None:
        super().__init__(fail)
        self.batches: list[tuple[list[str], bool]] = []

    def changed_many(self, notices: list[tuple[Workload, Phase, Status | None]]) -> None:
        self.batches.append(([f"{w.uid}:{phase.value}" for w, phase, _s in notices], connection.in_atomic_block))
        if self.fail:
            LocalWorkload.objects.filter(uid=notices[0][0].uid).update(reason="written by the failing listener")
            raise RuntimeError("the listener broke")


@pytest.fixture
def listen():
    registered = []

    def register(label: str, listener: Recorder) -> Recorder:
        hooks.register(label, listener)
        registered.append(label)
        return listener

    yield register
    for label in registered:
        hooks._listeners.pop(label, None)


def workload(uid: str, label: str) -> tuple[Workload, LocalWorkload]:
    w = Workload(name=uid, uid=uid, project="p", command=["/bin/true"], labels={label: "1"})
    return w, LocalWorkload.objects.create(uid=uid, spec=w.as_dict(), state=LocalWorkload.State.RUNNING)


def ended(w: Workload, row: LocalWorkload, state: str = "succeeded", code: int = 0) -> Notice:
    end = End(row.pk, state, code, "", {"wall_seconds": 0.1}, timezone.now())
    return Notice(w, Phase(state), Status(Phase(state), exit_code=code), end)


def test_a_batch_goes_to_its_listener_at_once_inside_the_transaction_that_records_the_ends(listen):
    listener = listen("batch", BatchRecorder())
    (a, row_a), (b, row_b) = workload("a", "batch"), workload("b", "batch")
    Notifier.deliver(
        [Notice(a, Phase.RUNNING), Notice(b, Phase.RUNNING), ended(a, row_a), ended(b, row_b, "failed", 3)]
    )
    assert listener.batches == [(["a:running", "b:running", "a:succeeded", "b:failed"], True)]
    rows = {r.uid: r for r in LocalWorkload.objects.all()}
    assert (rows["a"].state, rows["a"].exit_code, rows["a"].usage) == ("succeeded", 0, {"wall_seconds": 0.1})
    assert (rows["b"].state, rows["b"].exit_code) == ("failed", 3)
    assert rows["a"].finished_at is not None


def test_starts_alone_are_not_wrapped_in_a_transaction(listen):
    listener = listen("batch", BatchRecorder())
    a, _row = workload("a", "batch")
    Notifier.deliver([Notice(a, Phase.RUNNING)])
    assert listener.batches == [(["a:running"], False)]  # a start is a progress marker with a commit of its own


def test_a_failing_listener_loses_none_of_the_ends(listen):
    listen("batch", BatchRecorder(fail=True))
    a, row = workload("a", "batch")
    Notifier.deliver([ended(a, row)])
    row.refresh_from_db()
    assert row.state == "succeeded"  # recorded again after the listener's transaction was rolled back
    assert row.reason == ""  # and nothing the failing listener wrote was kept


def test_a_listener_without_batches_hears_each_change_after_its_end_is_recorded(listen):
    listener = listen("plain", Recorder())
    a, row = workload("a", "plain")
    Notifier.deliver([Notice(a, Phase.RUNNING), ended(a, row)])
    assert listener.heard == [("a", Phase.RUNNING, "succeeded"), ("a", Phase.SUCCEEDED, "succeeded")]


def test_ends_nobody_listens_to_are_recorded():
    w, row = workload("orphan", "nobody")
    Notifier.deliver([ended(w, row, "failed", 1)])
    row.refresh_from_db()
    assert (row.state, row.exit_code) == ("failed", 1)


@pytest.fixture
def agent_here(settings):
    settings.PORTAL_AGENT_TIMEOUT = 15
    agent = LocalAgent(max_workloads=2)
    taken: list[list[str]] = []
    agent.take = lambda uids: taken.append(uids)  # what the agent would start
    agent_module._here = agent
    yield agent, taken
    agent_module._here = None
    agent.notifier.stop(timeout=5)
    agent.pool.shutdown(wait=False)
    agent.sock.close()


def test_what_the_agents_own_process_submits_is_taken_without_a_claim(agent_here):
    agent, taken = agent_here
    workloads = [Workload(name=f"w{i}", uid=f"w{i}", project="p", command=["/bin/true"]) for i in range(3)]
    with transaction.atomic():
        LocalRuntime().submit_many(workloads)
        assert taken == []  # not before the commit: the rows would not be there for it
    assert taken == [["w0", "w1"]]  # as many as it has room for
    claimed = dict(LocalWorkload.objects.values_list("uid", "agent_id"))
    assert claimed == {"w0": agent.agent.pk, "w1": agent.agent.pk, "w2": None}  # the rest: any agent claims them
    assert [row_id for row_id, _spec in agent_module.taken_rows(agent.agent.pk, ["w0", "w1", "w2"])] == [
        LocalWorkload.objects.get(uid="w0").pk,
        LocalWorkload.objects.get(uid="w1").pk,
    ]


def test_nothing_is_taken_when_the_submission_rolls_back(agent_here):
    _agent, taken = agent_here

    def submit_and_fail() -> None:
        with transaction.atomic():
            LocalRuntime().submit_many([Workload(name="w", uid="w", project="p", command=["/bin/true"])])
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        submit_and_fail()
    assert taken == []
    assert not LocalWorkload.objects.exists()


def test_a_start_waits_a_moment_for_its_end_and_is_delivered_with_it(listen, monkeypatch):
    monkeypatch.setattr("apps.runtime.local.notifier.START_SETTLE_SECONDS", 1.0)  # a moment even on a busy machine
    listener = listen("batch", BatchRecorder())
    (a, row_a), (b, _row_b) = workload("a", "batch"), workload("b", "batch")
    notifier = Notifier()

    def delivered(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(listener.batches) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    try:
        notifier.put(Notice(a, Phase.RUNNING))
        time.sleep(0.05)
        notifier.put(ended(a, row_a))
        delivered(1)
        notifier.put(Notice(b, Phase.RUNNING))  # a long task: its start goes alone, a moment later
        delivered(2)
    finally:
        notifier.stop(timeout=10)
    assert [names for names, _in_transaction in listener.batches] == [["a:running", "a:succeeded"], ["b:running"]]
