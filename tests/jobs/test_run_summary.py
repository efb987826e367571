"""The run page's live parts: the summary fragment (header with status and actions, the node table with timings and
re-run buttons) that static/js/run.js swaps in by id as nodes finish and when the run ends, instead of reloading;
and the resource-usage chart's place on the page."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import PipelineRun, RunStatus, TaskRun
from apps.jobs.services import start_run
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, pipeline


def url(name: str, run: PipelineRun, project: str = "project-a") -> str:
    return reverse(f"jobs:{name}", kwargs={"project": project, "pk": run.pk})


@pytest.fixture
def run(world) -> PipelineRun:
    pipe = pipeline(
        world.project_a,
        world.alice,
        [{"name": "make", "args": {"code": "1"}}, {"name": "use", "depends_on": ["make"], "args": {"code": "2"}}],
    )
    return start_run(pipe, world.alice)


@pytest.fixture
def alice(world, client) -> Client:
    client.force_login(world.alice)
    return client


def summary(client: Client, run: PipelineRun) -> str:
    response = client.get(url("run-summary", run))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_the_summary_of_an_active_run_has_its_header_and_nodes_and_nothing_else(alice, run):
    text = summary(alice, run)

    assert f'id="run" data-run="{run.pk}" data-summary-url="{url("run-summary", run)}"' in text
    assert 'id="run-tasks"' in text
    assert 'id="node-make" data-node="make"' in text
    assert 'id="node-use"' in text
    assert f'action="{url("run-cancel", run)}"' in text
    assert "Retry failed nodes" not in text
    assert "Re-run from here" not in text
    assert "<html" not in text  # a fragment, not the page
    assert "data-log-viewer" not in text


def test_once_the_run_ended_the_summary_has_its_timings_and_the_actions_of_a_finished_run(alice, run):
    started = timezone.now() - timedelta(seconds=75)
    TaskRun.objects.create(run=run, node="make", status="succeeded", started_at=started, finished_at=started
                           + timedelta(seconds=12))  # fmt: skip
    TaskRun.objects.create(run=run, node="use", status="failed", reason="exit code 1", started_at=started,
                           finished_at=started + timedelta(seconds=63))  # fmt: skip
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED, finished_at=timezone.now())

    text = summary(alice, run)

    assert 'data-status="failed"' in text
    assert "Retry failed nodes" in text
    assert text.count("Re-run from here") == 2
    assert f'action="{url("run-cancel", run)}"' not in text
    assert "exit code 1" in text
    assert started.astimezone(timezone.get_current_timezone()).strftime("%H:%M:%S") in text


def test_a_viewer_gets_the_summary_without_actions(world, run):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    client = Client()
    client.force_login(viewer)

    text = summary(client, run)

    assert 'id="node-make"' in text
    assert f'action="{url("run-cancel", run)}"' not in text


def test_an_outsider_gets_404(world, client, run):
    client.force_login(world.charlie)
    assert client.get(url("run-summary", run)).status_code == 404
    assert client.get(url("run-summary", run, project="project-b")).status_code == 404


def test_the_run_page_has_the_resource_usage_chart_fed_by_the_api(alice, run):
    text = html.unescape(alice.get(url("run-detail", run)).content.decode())

    assert 'id="run-usage"' in text
    assert f'data-url="/api/v1/runs/{run.pk}/usage/?points=300" data-active="1"' in text
    assert 'data-usage="cpu"' in text
    assert 'data-usage="rss"' in text
    assert "vendor/echarts/echarts.min.js" in text
    assert "js/charts.js" in text
    assert f'data-summary-url="{url("run-summary", run)}"' in text
