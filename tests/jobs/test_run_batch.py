"""jobs.services.RunBatch: several runs of one project started as `start_spec_run` starts one (frozen, checked
against the project's quota and templates, numbered, queued), with what does not differ between them read once and
no statement per run when they are written."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.jobs import services
from apps.jobs.models import PipelineRun
from apps.jobs.services import RunBatch, start_spec_run
from apps.outbox.models import PendingTask
from apps.projects.models import Role
from tests.factories import ProjectFactory, UserFactory, add_member, python_template

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return UserFactory(username="alice")


@pytest.fixture
def project(alice):
    python_template()
    project = ProjectFactory(owner=alice, slug="project-a")
    project.quota.cpu_cores = 1
    project.quota.save()
    return project


def spec(code: str = "pass", cpu: float = 0.5) -> dict:
    return {"nodes": [{"name": "t", "template": "py", "args": {"code": code}, "resources": {"cpu": cpu}}]}


def test_it_starts_the_runs_in_order_numbered_after_the_projects_last_and_queues_each(project, alice):
    first = start_spec_run(project, alice, spec("print(0)"), name="alone")
    batch = RunBatch(project, alice, trigger="study")
    for i in (1, 2, 3):
        batch.add(spec(f"print({i})"), name=f"trial-{i}")

    runs = batch.start()

    assert [(r.number, r.pipeline_name, r.trigger, r.status) for r in runs] == [
        (first.number + i, f"trial-{i}", "study", "queued") for i in (1, 2, 3)
    ]
    stored = PipelineRun.objects.filter(pk__in=[r.pk for r in runs]).order_by("number")
    assert [r.spec["nodes"][0]["args"]["code"] for r in stored] == ["print(1)", "print(2)", "print(3)"]
    # Frozen as start_spec_run freezes (the template pinned, the node's replicas and cache decided).
    assert {k: v for k, v in runs[0].spec["nodes"][0].items() if k != "args"} == {
        k: v for k, v in first.spec["nodes"][0].items() if k != "args"
    }
    queued = PendingTask.objects.filter(name="apps.jobs.tasks.advance_run").values_list("args", flat=True)
    assert sorted(queued) == sorted([[first.pk]] + [[r.pk] for r in runs])
    assert batch.start() == []  # started once


def test_a_spec_beyond_the_quota_or_invalid_is_refused_and_the_others_start(project, alice):
    batch = RunBatch(project, alice)
    batch.add(spec("print(1)"), name="fits")
    with pytest.raises(ValidationError) as refused:
        batch.add(spec("print(2)", cpu=4), name="too-large")
    assert "the limit is 1 (the project's quota)" in str(refused.value.message_dict)
    with pytest.raises(ValidationError):
        batch.add({"nodes": [{"name": "t", "template": "nope"}]}, name="invalid")
    batch.add(spec("print(3)"), name="fits-too")

    assert [r.pipeline_name for r in batch.start()] == ["fits", "fits-too"]


def test_the_quota_and_templates_are_read_once_per_batch(project, alice):
    def statements_to_add(n: int) -> int:
        batch = RunBatch(project, alice, permission_checked=True)
        with CaptureQueriesContext(connection) as queries:
            for i in range(n):
                batch.add(spec(f"print({i})"), name=f"r{i}")
        return len(queries)

    project.refresh_from_db()  # the quota not cached on the project object
    one = statements_to_add(1)
    project.refresh_from_db()
    assert one >= 2  # at least the quota and the template
    assert statements_to_add(6) == one


def test_writing_the_runs_takes_the_same_statements_for_one_or_many(project, alice):
    def statements_to_start(n: int) -> int:
        batch = RunBatch(project, alice, permission_checked=True)
        for i in range(n):
            batch.add(spec(f"print({i})"), name=f"r{i}")
        with CaptureQueriesContext(connection) as queries:  # in the test's transaction, as in a study's pass
            assert len(batch.start()) == n
        return len(queries)

    # One savepoint for the numbers (their retry), their read, the runs' insert and the advances' insert; no
    # savepoint of the batch's own inside the caller's transaction.
    assert statements_to_start(1) == statements_to_start(5) == 5


def test_a_number_taken_meanwhile_is_retried_with_the_next_ones(project, alice, monkeypatch):
    taken = start_spec_run(project, alice, spec(), name="taken")
    reads = []
    original = services._next_number

    def stale(p):  # the first read comes before another start took its number
        reads.append(p)
        return taken.number if len(reads) == 1 else original(p)

    monkeypatch.setattr(services, "_next_number", stale)
    batch = RunBatch(project, alice)
    batch.add(spec(), name="a")
    batch.add(spec(), name="b")
    with transaction.atomic():
        runs = batch.start()
    assert [r.number for r in runs] == [taken.number + 1, taken.number + 2]
    assert len(reads) == 2


def test_the_permission_is_checked_once_unless_the_caller_did(project):
    viewer = UserFactory(username="vic")
    add_member(project, viewer, Role.VIEWER)
    with pytest.raises(PermissionDenied):
        RunBatch(project, viewer)
    batch = RunBatch(project, viewer, permission_checked=True)  # the caller's business then (a study's pass)
    batch.add(spec(), name="r")
    assert len(batch.start()) == 1
