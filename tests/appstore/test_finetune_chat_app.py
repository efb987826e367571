"""The "fine-tune a chat model" app end to end with real parts (issue 22, acceptance 1): installed into a fresh
project, its pipeline run by a real agent in the `llm` environment (LoRA fine-tune of the packaged SmolLM2 → evaluate
against the base → register), the registered adapter deployed as an `llm` service, answering OpenAI's chat
completions through the router. On the app's fixed seed the held-out loss drops, and the tuned model answers in the
taught format ("Topic: <topic>") where the base does not. Minutes on CPU; skipped without `make llm-env`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from apps.appstore.services import install
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from apps.models.models import Run
from apps.serving.models import InferenceService
from apps.serving.router.asgi import invalidate
from apps.serving.tasks import follow_alias
from tests.appstore.factories import builtin_version
from tests.factories import ProjectFactory, UserFactory, make_token
from tests.jobs.conftest import drive as drive_run
from tests.serving.factories import artifact_store, fast_serving  # noqa: F401 (fixtures)
from tests.serving.factories import drive as drive_service
from tests.serving.llm import llm_env_missing

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]
FORMAT = re.compile(r"Topic: (sport|weather|cooking)")
STEPS = 8
LOAD_SECONDS = 600  # the packaged model loads in ~25 s on an idle machine, minutes on a loaded one


@pytest.fixture(autouse=True)
def _needs_llm_env():
    if reason := llm_env_missing():
        pytest.skip(reason)


def output_of(run, node: str) -> Path:
    return Path(run.tasks.get(node=node).output_dir)


@pytest.mark.usefixtures("artifact_store", "fast_serving")
def test_the_app_fine_tunes_the_packaged_model_into_the_format_and_serves_it(api_agent, live_asgi, settings):
    settings.PORTAL_SERVING_READY_TIMEOUT = LOAD_SECONDS
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    # 8 optimiser steps, not the app's 20: on its seed the held-out loss is ~0.03 after 10 (docs/llm.md), already
    # enough for the format; each step costs 3 s of CPU, 10-20 s of a shared machine.
    installation = install(builtin_version("finetune-chat"), project, owner, parameters={"max_steps": STEPS})
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")
    assert service.framework == "llm"

    run = drive_run(start_run(pipeline, owner), timeout=1800)

    logs = [line.text for line in LogLine.objects.filter(task__run=run).order_by("id")][-40:]
    assert run.status == "succeeded", "\n".join([run.reason, *logs])
    # The held-out loss drops (the fine-tune's own before/after on 12 held-out rows).
    trained = json.loads((output_of(run, "finetune") / "metrics.json").read_text())
    assert trained["eval_loss_after"] < trained["eval_loss_before"] / 2, trained
    # The base answers in prose, the tuned model in the format, on the same held-out prompts.
    compared = json.loads((output_of(run, "evaluate") / "comparison.json").read_text())
    assert compared["metrics"]["base"]["format_match"] == 0, compared["answers"][:3]
    assert compared["metrics"]["tuned"]["format_match"] >= 0.75, compared["answers"]
    assert compared["metrics"]["tuned"]["eval_perplexity"] < compared["metrics"]["base"]["eval_perplexity"]
    # Both evaluations are tracking runs with the same metrics: the experiment's comparison table.
    evaluated = {
        r.tags.get(key="portal.evaluation").value: r for r in Run.objects.filter(tags__key="portal.evaluation")
    }
    assert set(evaluated) == {"base", "tuned"}
    for label, tracked in evaluated.items():
        latest = {m.key: m.value for m in tracked.latest_metrics.all()}
        assert latest["format_match"] == pytest.approx(compared["metrics"][label]["format_match"])
    # The registered version is the adapter, its description the card: base, data, method.
    version = model.versions.get()
    assert "SmolLM2-135M-Instruct" in version.description
    assert "LoRA r=8" in version.description
    assert "topics.jsonl" in version.description
    assert f"{STEPS} optimiser steps" in version.description  # the install's parameter reached the fine-tune

    follow_alias(version.registered_model_id, "staging")
    service = drive_service(
        service, lambda s: s.status in (InferenceService.Status.READY, InferenceService.Status.FAILED), LOAD_SECONDS
    )
    assert service.status == InferenceService.Status.READY, service.reason
    invalidate()
    question = "What is this sentence about? Thunderstorms will roll in from the west this evening."
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 12, "temperature": 0}
    headers = {"Authorization": f"Bearer {make_token(owner)}"}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=180) as client:
        answer = client.post(f"/serving/fresh/{service.name}/v1/chat/completions", json=body)

    assert answer.status_code == 200, answer.text
    assert FORMAT.fullmatch(answer.json()["choices"][0]["message"]["content"].strip()), answer.json()
