"""An `llm` service end to end on the local runtime: created, deployed, its replica started by a real agent in the
`llm` task environment ({python:llm}, sandboxed where the machine has the sandbox), probed ready once the packaged
model is loaded, and answering OpenAI's chat completions through the router with a project token."""

from __future__ import annotations

import httpx
import pytest

from apps.serving.models import InferenceService, Revision
from apps.serving.router.asgi import invalidate
from apps.serving.services import create_service, deploy
from tests.factories import make_token
from tests.serving.factories import artifact_store, drive, fast_serving, svc_agent  # noqa: F401 (fixtures)
from tests.serving.llm import llm_env_missing

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
LOAD_SECONDS = 420  # the packaged model loads in ~25 s on an idle machine, minutes on a loaded one


@pytest.fixture(autouse=True)
def _needs_llm_env():
    if reason := llm_env_missing():
        pytest.skip(reason)


@pytest.mark.usefixtures("svc_agent")
def test_a_deployed_llm_service_answers_chat_through_the_router(world, live_asgi, settings):
    settings.PORTAL_SERVING_READY_TIMEOUT = LOAD_SECONDS
    service = create_service(world.project_a, world.alice, name="chat", framework="llm", memory="2Gi")
    revision = deploy(service, world.alice)

    service = drive(service, lambda s: s.status in (InferenceService.Status.READY, InferenceService.Status.FAILED),
                    timeout=LOAD_SECONDS)  # fmt: skip
    assert service.status == InferenceService.Status.READY, service.reason
    revision.refresh_from_db()
    assert revision.status == Revision.Status.READY
    invalidate()
    body = {"model": "chat", "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 20, "temperature": 0}  # fmt: skip
    headers = {"Authorization": f"Bearer {make_token(world.bob)}"}
    with httpx.Client(base_url=live_asgi.url, headers=headers, timeout=120) as bob:
        answer = bob.post("/serving/project-a/chat/v1/chat/completions", json=body)
        streamed = bob.post("/serving/project-a/chat/v1/chat/completions", json={**body, "stream": True})

    assert answer.status_code == 200, answer.text
    assert "Paris" in answer.json()["choices"][0]["message"]["content"]
    assert streamed.status_code == 200
    assert streamed.text.rstrip().endswith("data: [DONE]")
