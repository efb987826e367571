"""`manage.py demo` wires a chat model to its knowledge base: where the llm environment is built it makes the `chat`
service (the packaged model), points `portal-docs` at it, and queues its deploy for when an agent runs (the demo runs
before `make run` starts one); without the environment the base stays retrieval-only and the command says how to
add it. The deploy task waits for an agent, deploys once one heartbeats, and gives up saying why."""

from __future__ import annotations

import time
from io import StringIO

import pytest
from django.core.management import call_command

from apps.knowledge.models import KnowledgeBase
from apps.outbox.models import PendingTask
from apps.serving import tasks
from apps.serving.models import Framework, InferenceService
from tests.serving.factories import heartbeat_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm_env(settings, tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    settings.PORTAL_TASK_ENVS = {**settings.PORTAL_TASK_ENVS, "llm": str(python)}
    return python


def demo() -> str:
    out = StringIO()
    call_command("demo", stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_demo_answers_its_knowledge_base_with_the_packaged_chat_model(llm_env):
    demo()
    service = InferenceService.objects.get(project__slug="demo", name="chat")
    assert service.framework == Framework.LLM
    assert service.status == InferenceService.Status.PENDING  # no agent yet: `make run` starts it after the demo
    assert KnowledgeBase.objects.get(project__slug="demo", name="portal-docs").llm_service == service
    queued = PendingTask.objects.filter(name="apps.serving.tasks.deploy_when_possible")
    assert [row.args[0] for row in queued] == [service.pk]

    demo()  # idempotent: the same service, queued again while it has never started
    assert InferenceService.objects.filter(project__slug="demo", name="chat").count() == 1
    assert queued.all().count() == 2


def test_without_the_llm_environment_the_base_answers_retrieval_only(settings, tmp_path):
    settings.PORTAL_TASK_ENVS = {**settings.PORTAL_TASK_ENVS, "llm": str(tmp_path / "missing" / "python")}
    out = demo()
    assert not InferenceService.objects.filter(name="chat").exists()
    assert KnowledgeBase.objects.get(project__slug="demo", name="portal-docs").llm_service is None
    assert "make llm-env" in out


def test_a_base_given_another_model_keeps_it(llm_env):
    demo()
    kb = KnowledgeBase.objects.get(project__slug="demo", name="portal-docs")
    KnowledgeBase.objects.filter(pk=kb.pk).update(llm_service=None, llm_url="https://llm.example/v1", llm_model="m")
    demo()
    kb.refresh_from_db()
    assert kb.llm_service is None
    assert kb.llm_url == "https://llm.example/v1"


def test_the_deploy_waits_for_an_agent_then_deploys(llm_env, monkeypatch):
    demo()
    service = InferenceService.objects.get(project__slug="demo", name="chat")
    again = []
    monkeypatch.setattr(tasks.deploy_when_possible, "apply_async", lambda args, countdown: again.append(args))

    tasks.deploy_when_possible(service.pk, None, time.time() + 60)  # no agent: tried again later
    service.refresh_from_db()
    assert service.current_revision is None
    assert again == [(service.pk, None, again[0][2])]

    tasks.deploy_when_possible(service.pk, None, time.time() - 1)  # past its deadline: it says why it waits
    service.refresh_from_db()
    assert "agent" in service.reason
    assert len(again) == 1

    heartbeat_agent()
    tasks.deploy_when_possible(service.pk, None, time.time() + 60)
    service.refresh_from_db()
    revision = service.revisions.get()
    assert revision.config["framework"] == "llm"
    assert service.status == InferenceService.Status.DEPLOYING
    tasks.deploy_when_possible(service.pk, None, time.time() + 60)  # run twice: nothing more
    assert service.revisions.count() == 1
