"""A run's log history and download on the API (`/api/v1/runs/{id}/logs/`), with tokens: paged, filtered, searched.

Who may call them is test_access_matrix.py's job too; the token's project scope is checked here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.jobs.logs import LogWriter
from apps.jobs.models import LogLine, PipelineRun, TaskRun
from tests.conftest import token_client
from tests.factories import ProjectFactory

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def run(world) -> PipelineRun:
    run = PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=7)
    fit = TaskRun.objects.create(run=run, node="fit")
    fit_again = TaskRun.objects.create(run=run, node="fit", attempt=2)
    evaluate = TaskRun.objects.create(run=run, node="eval")
    lines = ((fit, "0", ["loading", "Traceback: boom"]), (fit, "1", ["worker 1 up"]), (fit_again, "0", ["retrying"]),
             (evaluate, "0", ["accuracy 0.9", "LOADING done"]))  # fmt: skip
    for task, replica, texts in lines:
        with LogWriter(task) as writer:
            for i, text in enumerate(texts):
                writer.write(replica, "stdout", text, ts=T0 + timedelta(seconds=i))
    return run


def texts(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [line["text"] for line in response.json()["results"]]


def test_a_token_reads_every_line_in_storage_order_with_its_fields(world, run):
    response = token_client(world.bob).get(f"/api/v1/runs/{run.pk}/logs/")
    assert texts(response) == ["loading", "Traceback: boom", "worker 1 up", "retrying", "accuracy 0.9", "LOADING done"]
    first = response.json()["results"][0]
    fit = run.tasks.get(node="fit", attempt=1)
    assert first == {
        "id": LogLine.objects.get(task=fit, seq=1).pk, "task": fit.pk, "node": "fit", "attempt": 1, "replica": "0",
        "seq": 1, "ts": T0.isoformat(), "stream": "stdout", "text": "loading",
    }  # fmt: skip
    assert response.json()["next"] is None


def test_pages_follow_next_until_the_end(world, run):
    client = token_client(world.bob)
    page = client.get(f"/api/v1/runs/{run.pk}/logs/", {"limit": 4, "node": "fit"}).json()
    assert [line["text"] for line in page["results"]] == ["loading", "Traceback: boom", "worker 1 up", "retrying"]
    assert "node=fit" in page["next"]
    assert "after=" in page["next"]
    last = client.get(page["next"]).json()
    assert (last["results"], last["next"]) == ([], None)
    page = client.get(f"/api/v1/runs/{run.pk}/logs/", {"limit": 2}).json()
    rest = client.get(page["next"]).json()
    assert [line["text"] for line in rest["results"]] == ["worker 1 up", "retrying"]


def test_filters_by_node_replica_and_attempt(world, run):
    client = token_client(world.alice)
    fit_again = run.tasks.get(node="fit", attempt=2)
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"node": "eval"})) == ["accuracy 0.9", "LOADING done"]
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"node": "fit", "replica": "1"})) == ["worker 1 up"]
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"task": fit_again.pk})) == ["retrying"]


def test_search_ignores_case_and_combines_with_the_filters(world, run):
    client = token_client(world.bob)
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"q": "loading"})) == ["loading", "LOADING done"]
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"q": "loading", "node": "eval"})) == ["LOADING done"]
    first = LogLine.objects.get(text="loading").pk
    assert texts(client.get(f"/api/v1/runs/{run.pk}/logs/", {"q": "LOAD", "after": first})) == ["LOADING done"]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 0}, "limit"), ({"limit": 5001}, "limit"), ({"after": -1}, "after"), ({"after": "x"}, "after"),
     ({"q": " "}, "q"), ({"q": "x" * 201}, "q"), ({"task": "abc"}, "task"), ({"node": "a\x00b"}, "node"),
     ({"q": "a\x00"}, "q"), ({"after": 2**64}, "after"), ({"task": 2**64}, "task")],
)  # fmt: skip
def test_bad_queries_are_400_naming_the_field(world, run, params, field):
    response = token_client(world.bob).get(f"/api/v1/runs/{run.pk}/logs/", params)
    assert response.status_code == 400
    assert field in response.json()


def test_another_tenants_run_and_a_token_of_another_project_see_404(world, run):
    assert token_client(world.charlie).get(f"/api/v1/runs/{run.pk}/logs/").status_code == 404
    assert token_client(world.charlie).get(f"/api/v1/runs/{run.pk}/logs/download/").status_code == 404
    other = ProjectFactory(owner=world.bob, slug="bobs")
    scoped = token_client(world.bob, project=other)
    assert scoped.get(f"/api/v1/runs/{run.pk}/logs/").status_code == 404
    assert token_client(world.bob, project=world.project_a).get(f"/api/v1/runs/{run.pk}/logs/").status_code == 200


def test_download_is_the_whole_log_as_text_or_one_nodes(world, run):
    client = token_client(world.bob)
    response = client.get(f"/api/v1/runs/{run.pk}/logs/download/")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert 'filename="train-7.log"' in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()
    assert body.splitlines()[0] == f"{T0.isoformat()} [fit#1/0] loading"
    assert len(body.splitlines()) == 6
    eval_only = b"".join(client.get(f"/api/v1/runs/{run.pk}/logs/download/", {"node": "eval"}).streaming_content)
    assert eval_only.decode().splitlines() == [
        f"{T0.isoformat()} [eval#1/0] accuracy 0.9",
        f"{(T0 + timedelta(seconds=1)).isoformat()} [eval#1/0] LOADING done",
    ]
