"""A user who picks 中文 sees the run page, the project overview and the pipeline list in Chinese, and the
browser's scripts get the Chinese catalogue from /jsi18n/."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.services import start_run
from tests.factories import pipeline


@pytest.fixture
def chinese(world, client) -> Iterator[Client]:
    world.alice.language = "zh-hans"
    world.alice.save(update_fields=["language"])
    client.force_login(world.alice)
    yield client
    translation.activate(settings.LANGUAGE_CODE)  # a request leaves its language active in this thread


@pytest.fixture
def failed_run(world) -> PipelineRun:
    pipe = pipeline(
        world.project_a,
        world.alice,
        [{"name": "make", "args": {"code": "1"}}, {"name": "use", "depends_on": ["make"], "args": {"code": "2"}}],
    )
    run = start_run(pipe, world.alice)
    now = timezone.now()
    TaskRun.objects.create(run=run, node="make", status=TaskStatus.FAILED, exit_code=1, started_at=now, finished_at=now)
    TaskRun.objects.create(run=run, node="use", status=TaskStatus.UPSTREAM_FAILED, finished_at=now)
    run.status, run.finished_at = RunStatus.FAILED, now
    run.save(update_fields=["status", "finished_at"])
    return run


def chinese_page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert '<html lang="zh-hans">' in page
    return page


def visible_text(page: str) -> str:
    return re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S))


PROJECT_TABS = ["概览", "构建", "运行", "模型", "设置"]  # the groups of the project navigation


def test_the_run_page_is_in_chinese(chinese, failed_run):
    page = chinese_page(chinese, reverse("jobs:run-detail", kwargs={"project": "project-a", "pk": failed_run.pk}))

    words = ["手动启动", "失败", "上游失败", "重试失败的节点", "节点", "尝试次数", "耗时", "进度", "日志"]
    for text in words + PROJECT_TABS:
        assert text in page, text
    text = visible_text(page)
    for english in ["Retry failed nodes", "Started by hand", "Upstream failed", "Duration", "Attempt", "Logs"]:
        assert english not in text, english


def test_the_project_overview_is_in_chinese(chinese, world):
    page = chinese_page(chinese, reverse("projects:overview", kwargs={"project": "project-a"}))

    for text in ["还没有描述。", "今日运行", "队列", *PROJECT_TABS]:
        assert text in page, text
    text = visible_text(page)
    for english in ["Overview", "Pipelines", "Members", "Runs today", "Queue"]:
        assert english not in text, english


def test_the_pipeline_list_is_in_chinese(chinese, failed_run):
    page = chinese_page(chinese, reverse("jobs:pipeline-list", kwargs={"project": "project-a"}))

    for text in ["新建流水线", "从 YAML 新建", "最近运行", "更新时间", "失败"]:
        assert text in page, text
    text = visible_text(page)
    for english in ["New pipeline", "New from YAML", "Last run", "Updated", "Failed"]:
        assert english not in text, english


def test_the_javascript_catalogue_is_in_the_users_language(chinese):
    response = chinese.get(reverse("javascript-catalog"))

    body = response.content.decode()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    expected = {"Running": "运行中", "Upstream failed": "上游失败", "points (downsampled)": "个点（已降采样）"}
    for msgid, translated in expected.items():
        assert f"{json.dumps(msgid)}: {json.dumps(translated)}" in body, msgid


def test_the_javascript_catalogue_of_an_english_visitor_has_no_chinese(db, client):
    body = client.get(reverse("javascript-catalog"), HTTP_ACCEPT_LANGUAGE="en").content.decode()

    assert json.dumps("运行中") not in body


def test_every_page_loads_the_javascript_catalogue_before_its_scripts(chinese, failed_run):
    page = chinese.get(reverse("jobs:run-detail", kwargs={"project": "project-a", "pk": failed_run.pk})).content
    page = page.decode()

    catalogue = page.index(f'<script src="{reverse("javascript-catalog")}" defer></script>')
    assert catalogue < page.index("js/run.js")
    assert catalogue < page.index("js/logviewer.js")
