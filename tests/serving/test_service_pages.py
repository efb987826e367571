"""The service pages: the list (status, replicas ready/wanted, requests/s), the new/edit form with field errors,
the service page (rollout state, replicas with log tails, revisions with rollback, canary and shadow controls, the
key shown once, and a test console built from the model's own metadata), and who may do what."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.urls import reverse

from apps.projects.models import Role
from apps.serving.models import InferenceService, Replica, Revision, RevisionTraffic
from apps.serving.replicas import probe_ready
from apps.serving.services import create_service, deploy
from tests.factories import UserFactory, add_member
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, make_ready, register  # noqa: F401

pytestmark = pytest.mark.usefixtures("artifact_store")


def page(name: str, service: InferenceService | None = None, project: str = "project-a") -> str:
    kwargs = {"project": project} if service is None else {"project": project, "pk": service.pk}
    return reverse(f"serving:{name}", kwargs=kwargs)


@pytest.fixture
def version(world):
    return register(world.project_a, world.alice, iris_bytes())


@pytest.fixture
def served(world, version) -> InferenceService:
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                             model_version=1, max_replicas=2)  # fmt: skip
    make_ready(deploy(service, world.alice))
    service.refresh_from_db()
    return service


def test_the_list_shows_status_replicas_and_traffic(client, world, served):
    revision = served.current_revision
    minute = datetime.fromtimestamp((datetime.now(UTC).timestamp() // 60 - 1) * 60, UTC)
    RevisionTraffic.objects.create(revision=revision, minute=minute, source="web", requests=600, latency_buckets=[])
    client.force_login(world.bob)
    html = client.get(page("service-list")).content.decode()
    assert 'data-service="iris"' in html
    assert 'data-status="ready"' in html
    assert '<td class="small" data-replicas>1/1</td>' in html
    assert '<td class="small">10.0</td>' in html  # 600 requests in the last full minute
    assert "iris-classifier v1" in html
    assert page("service-create") in html  # an editor may create
    assert "<code>/serving/&lt;project&gt;/&lt;service&gt;/</code>" in html  # the placeholders are text, not tags


def test_a_viewer_sees_but_cannot_change(client, world, served):
    viewer = UserFactory(username="grace")
    add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert page("service-create") not in client.get(page("service-list")).content.decode()
    html = client.get(page("service-detail", served)).content.decode()
    assert 'data-revision="1"' in html
    assert page("service-deploy", served) not in html
    assert page("service-rollback", served) not in html
    for name in ("service-deploy", "service-stop", "service-rotate-key", "service-delete"):
        assert client.post(page(name, served)).status_code == 403
    assert client.get(page("service-edit", served)).status_code == 403


def test_outsiders_get_404(client, world, served):
    client.force_login(world.charlie)
    for name in ("service-detail", "service-status", "service-edit"):
        assert client.get(page(name, served)).status_code == 404
    assert client.post(page("service-deploy", served)).status_code == 404
    assert client.get(page("service-list")).status_code == 404


def test_the_form_shows_errors_by_field_and_creates(client, world, version):
    heartbeat_agent()
    client.force_login(world.bob)
    form = {"name": "iris", "stage": "debug", "registered_model": str(version.registered_model.pk),
            "model_version": "1", "framework": "sklearn", "cpu": "1", "memory": "1Gi", "gpu": "0",
            "min_replicas": "3", "max_replicas": "2", "scale_metric": "concurrency", "scale_target": "8",
            "auth": "token"}  # fmt: skip
    response = client.post(page("service-create"), form)
    assert response.status_code == 200
    assert "At least the minimum (3)." in response.content.decode()
    assert not InferenceService.objects.exists()
    response = client.post(page("service-create"), {**form, "model_version": "7", "min_replicas": "1"})
    assert "iris-classifier has no version 7." in response.content.decode()

    response = client.post(page("service-create"), {**form, "min_replicas": "1", "deploy": "1"})
    service = InferenceService.objects.get(name="iris")
    assert response.status_code == 302
    assert response["Location"] == page("service-detail", service)
    assert service.revisions.get().status == Revision.Status.ROLLING_OUT

    edit = client.get(page("service-edit", service)).content.decode()
    assert 'name="name"' not in edit  # fixed once created
    response = client.post(page("service-edit", service), {**form, "min_replicas": "1", "max_replicas": "x"})
    assert "Give a whole number." in response.content.decode()
    response = client.post(page("service-edit", service), {**form, "min_replicas": "1", "max_replicas": "2"})
    assert response.status_code == 302
    service.refresh_from_db()
    assert service.max_replicas == 2


def test_the_page_acts_and_says_what_happened(client, world, served, version):
    client.force_login(world.bob)
    detail = page("service-detail", served)
    html = client.get(detail).content.decode()
    assert 'data-status="ready"' in html
    assert "serving r1" in html
    assert "No replica is ready" not in html  # the replica is ready (nothing answers there: no metadata)
    assert "The model&#x27;s metadata could not be read" in html

    response = client.post(page("service-deploy", served), follow=True)
    assert "Rolling out r2; the current revision serves until it is ready." in response.content.decode()
    html = client.get(page("service-status", served)).content.decode()
    assert 'data-rollout="2"' in html
    assert f'data-live="service:{served.pk}"' in html  # fetched again on the project's events, not polled

    response = client.post(page("service-rollback", served), {"revision": "nope"}, follow=True)
    assert "Give a revision number." in response.content.decode()
    response = client.post(page("service-canary", served), {"percent": "150"}, follow=True)
    assert "Give a whole number from 0 to 100." in response.content.decode()

    response = client.post(page("service-rotate-key", served))
    assert response.status_code == 200
    served.refresh_from_db()
    key_html = response.content.decode()
    assert f"<code data-new-key>{served.key_prefix}" in key_html
    assert "data-new-key" not in client.get(detail).content.decode()  # shown once

    Replica.objects.filter(revision__service=served).update(log_tail="modelserver: serving iris (sklearn) on …")
    assert "modelserver: serving iris (sklearn)" in client.get(detail).content.decode()

    response = client.post(page("service-delete", served))
    assert response["Location"] == page("service-list")
    assert not InferenceService.objects.filter(pk=served.pk).exists()


def test_the_console_is_built_from_the_models_metadata(client, world, served, tmp_path):
    """A real model server answers for the ready replica: its inputs (name, datatype, shape) become the form."""
    model = tmp_path / "model.joblib"
    model.write_bytes(iris_bytes())
    server = subprocess.Popen(
        [sys.executable, "-m", "apps.serving.modelserver", "--name", "iris", "--model", str(model), "--port", "0"],
        cwd=settings.BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        banner = server.stdout.readline()
        upstream = banner.split(" on ", 1)[1].split()[0]
        deadline = time.monotonic() + 60
        while not probe_ready(upstream):
            assert time.monotonic() < deadline, "the model server never got ready"
            time.sleep(0.1)
        Replica.objects.filter(revision__service=served).update(upstream=upstream)
        client.force_login(world.alice)
        html = client.get(page("service-detail", served)).content.decode()
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert 'data-url="/serving/project-a/iris/v2/models/iris/infer"' in html
    assert '<div class="small text-body-secondary" data-input="input-0"><code>input-0</code> FP64 [-1, 4]</div>' in html
    assert "&quot;shape&quot;: [\n        1,\n        4\n      ]" in html  # an example request of one row
    # One field per feature (the iris model names none: by position), the JSON view kept, snippets to the full URL.
    for i in range(4):
        assert f'data-feature="x{i}" value="0"' in html
    assert "Use a row from the dataset" in html
    assert '<details class="mt-2" id="console-json">' in html
    assert 'data-url="http://testserver/serving/project-a/iris/v2/models/iris/infer"' in html
    assert f'data-sample-url="/api/v1/services/{served.pk}/sample-row/"' in html
    # "Explain": the service API's explain action, its bars drawn in #console-explanation by serving.js.
    assert f'data-console-explain data-url="/api/v1/services/{served.pk}/explain/"' in html
    assert '<div class="small mt-2" id="console-explanation" aria-live="polite"' in html
    assert "js/serving.js" in html
    assert "vendor/echarts/echarts.min.js" in html


def test_the_page_redraws_what_serves_in_place_once_the_rollout_it_follows_is_over(client, world, version):
    """The test console, the revisions and the canary controls are drawn with the page: once the project's events
    say the service settled, live.js fetches the page again and swaps those parts in by id (never a reload)."""
    heartbeat_agent()
    service = create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                             model_version=1)  # fmt: skip
    revision = deploy(service, world.alice)
    client.force_login(world.alice)
    detail = page("service-detail", service)
    html = client.get(detail).content.decode()
    assert 'data-project-events="/ws/projects/project-a/events/"' in html
    settled = f'data-live="service:{service.pk}" data-live-when="settled" data-live-url="{detail}"'
    for part in ["service-header", "service-console", "service-canary", "service-shadow", "service-revisions"]:
        assert f'id="{part}" {settled}' in html, part
    assert "No replica is ready" in html
    status = client.get(page("service-status", service), headers={"HX-Request": "true"})
    assert "HX-Refresh" not in status.headers
    assert "hx-trigger" not in status.content.decode()
    assert 'data-live-settled="0"' in status.content.decode()  # drawn while it rolls out

    make_ready(revision)
    status = client.get(page("service-status", service), headers={"HX-Request": "true"}).content.decode()
    assert 'data-live-settled="1"' in status  # live.js then fetches the settled parts, even had it missed the event
    html = client.get(detail, headers={"HX-Request": "true"}).content.decode()  # what live.js fetches
    assert "No replica is ready" not in html  # the console's part now holds the console (or why it cannot)
    assert 'id="service-revisions"' in html
    assert 'data-revision="1"' in html
