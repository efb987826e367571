"""The log pages of a run: the viewer, the download and the search behind the viewer.

Who may open which page is test_access_matrix.py's job; these tests check what the pages show and do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from django.urls import reverse

from apps.jobs.logs import LogWriter, iter_text
from apps.jobs.models import PipelineRun, TaskRun

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def run(world) -> PipelineRun:
    run = PipelineRun.objects.create(project=world.project_a, pipeline_name="train", number=7)
    fit = TaskRun.objects.create(run=run, node="fit")
    fit_again = TaskRun.objects.create(run=run, node="fit", attempt=2)
    evaluate = TaskRun.objects.create(run=run, node="eval")
    for task, texts in ((fit, ["loading", "Traceback: boom"]), (fit_again, ["retrying"]), (evaluate, ["accuracy 0.9"])):
        with LogWriter(task) as writer:
            for i, text in enumerate(texts):
                writer.write("0", "stderr" if "boom" in text else "stdout", text, ts=T0 + timedelta(seconds=i))
    return run


@pytest.fixture
def bob(world, client) -> Client:
    client.force_login(world.bob)
    return client


def url(name: str, run: PipelineRun) -> str:
    return reverse(f"jobs:{name}", kwargs={"project": run.project.slug, "pk": run.pk})


def test_the_viewer_renders_for_a_member_with_its_configuration(bob, run):
    response = bob.get(url("run-logs", run))
    assert response.status_code == 200
    assert [t.name for t in response.templates][:2] == ["jobs/logs.html", "base.html"]
    assert "jobs/partials/log_viewer.html" in [t.name for t in response.templates]
    html = response.content.decode()
    assert f'data-ws-path="/ws/runs/{run.pk}/logs/"' in html
    assert f'data-search-url="{url("run-logs-search", run)}"' in html
    assert f'href="{url("run-logs-download", run)}"' in html
    assert "js/logviewer.js" in html
    fit_ids = ",".join(str(pk) for pk in run.tasks.filter(node="fit").order_by("attempt").values_list("pk", flat=True))
    assert f'value="{fit_ids}" data-node="fit"' in html  # every attempt of a node, then each attempt
    assert "fit, attempt 2" in html
    assert "<script>" not in html  # configuration travels in data- attributes


def test_the_download_is_the_whole_log_as_an_attachment(bob, run):
    response = bob.get(url("run-logs-download", run))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="train-7.log"'
    text = b"".join(response.streaming_content).decode()
    assert text == "".join(iter_text(run))
    assert text.splitlines()[0] == f"{T0.isoformat()} [fit#1/0] loading"
    assert len(text.splitlines()) == 4


def test_the_download_of_one_node(bob, run):
    response = bob.get(url("run-logs-download", run), {"node": "eval"})
    assert response["Content-Disposition"] == 'attachment; filename="train-7-eval.log"'
    assert b"".join(response.streaming_content).decode() == f"{T0.isoformat()} [eval#1/0] accuracy 0.9\n"


def test_the_download_streams_asynchronously_under_asgi(world, run):
    client = AsyncClient()
    client.force_login(world.bob)
    response = async_to_sync(client.get)(url("run-logs-download", run))
    assert response.status_code == 200
    assert response.is_async

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    assert async_to_sync(read)().decode() == "".join(iter_text(run))


def test_search_returns_matching_lines_as_json(bob, run):
    response = bob.get(url("run-logs-search", run), {"q": "TRACEBACK"})
    assert response.status_code == 200
    [match] = response.json()["matches"]
    assert (match["text"], match["node"], match["stream"]) == ("Traceback: boom", "fit", "stderr")
    assert response.json()["truncated"] is False
    assert bob.get(url("run-logs-search", run), {"q": "a", "node": "eval"}).json()["matches"][0]["text"] == (
        "accuracy 0.9"
    )


@pytest.mark.parametrize("q", ["", "   ", "x" * 201])
def test_search_rejects_an_empty_or_long_query(bob, run, q):
    response = bob.get(url("run-logs-search", run), {"q": q})
    assert response.status_code == 400
    assert response.json()["error"]


def test_search_without_a_query_finds_nothing(bob, run):
    assert bob.get(url("run-logs-search", run)).json() == {"matches": [], "truncated": False}


def test_first_error_jumps_to_the_traceback(bob, run):
    line = bob.get(url("run-logs-search", run), {"first_error": "1"}).json()["line"]
    assert (line["text"], line["node"], line["attempt"]) == ("Traceback: boom", "fit", 1)


@pytest.mark.parametrize("name", ["run-logs", "run-logs-download", "run-logs-search"])
def test_a_non_member_gets_404(world, client, run, name):
    client.force_login(world.charlie)
    assert client.get(url(name, run), {"q": "boom"}).status_code == 404


@pytest.mark.parametrize("name", ["run-logs", "run-logs-download", "run-logs-search"])
def test_another_projects_run_is_404_even_under_my_project(world, client, name):
    theirs = PipelineRun.objects.create(project=world.project_b, pipeline_name="secret", number=1)
    client.force_login(world.alice)
    mine_url = reverse(f"jobs:{name}", kwargs={"project": world.project_a.slug, "pk": theirs.pk})
    assert client.get(mine_url, {"q": "x"}).status_code == 404
