"""A project admin publishes the demo's iris pipeline as an app and shares it with a second project, whose member
installs it (and runs it, in the live test); a third project cannot see it; only an admin publishes; public apps
wait for staff approval; a new version leaves installed ones alone."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.appstore.models import App
from apps.appstore.publish import publish_pipeline
from apps.appstore.services import bundle_of, install, resolve_app_version
from apps.datasets import demo as datasets_demo
from apps.jobs import demo as jobs_demo
from apps.jobs.models import Pipeline
from apps.jobs.services import start_run
from tests.conftest import user_client
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import AgentProcess, drive


def iris_pipeline(project, owner) -> Pipeline:
    jobs_demo.builtin_templates(project, owner)
    datasets_demo.populate(project, owner)
    return jobs_demo.iris_pipeline(project, owner)


def shared_iris(world) -> App:
    pipeline = iris_pipeline(world.project_a, world.alice)
    version = publish_pipeline(
        pipeline, world.alice, name="iris-pipeline", version="1.0.0", title="Iris pipeline",
        summary="Train and register an iris classifier.", visibility="shared", share_with=[world.project_b],
    )  # fmt: skip
    return version.app


@pytest.mark.django_db
def test_the_bundle_carries_the_dataset_the_pipeline_reads(world):
    app = shared_iris(world)
    version = app.latest
    assert (app.project, app.visibility, app.approved) == (world.project_a, "shared", False)
    assert list(app.shared_with.all()) == [world.project_b]
    files = bundle_of(version).files
    assert set(files) == {"datasets/iris/iris.csv", "datasets/iris/README.md"}
    assert files["datasets/iris/iris.csv"].startswith(b"sepal_length,sepal_width,petal_length,petal_width")
    [pipeline] = version.spec["pipelines"]
    assert pipeline["nodes"][0]["args"] == {"dataset": "{{ install }}-iris"}
    assert [n["template"] for n in pipeline["nodes"]] == ["dataset-load", "data-split", "sklearn-train",
                                                         "evaluate", "model-register"]  # fmt: skip


@pytest.mark.django_db
def test_the_shared_project_sees_and_installs_it_and_a_third_gets_404(world):
    app = shared_iris(world)
    dave = UserFactory(username="dave")
    ProjectFactory(owner=dave, slug="project-c")

    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 200
    assert user_client(dave).get(f"/api/v1/apps/{app.pk}/").status_code == 404
    assert app.pk not in [a["id"] for a in user_client(dave).get("/api/v1/apps/").json()["results"]]
    client = user_client(world.charlie)
    response = client.post(
        "/api/v1/installations/", {"project": "project-b", "app": app.pk, "name": "flowers"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert Pipeline.objects.get(project=world.project_b, name="flowers").spec["nodes"][0]["args"] == {
        "dataset": "flowers-iris"
    }
    missing = user_client(dave).post("/api/v1/installations/", {"project": "project-c", "app": app.pk}, format="json")
    assert (missing.status_code, list(missing.json())) == (400, ["app"])


@pytest.mark.django_db
def test_only_a_project_admin_publishes_and_public_waits_for_approval(world):
    pipeline = iris_pipeline(world.project_a, world.alice)
    with pytest.raises(PermissionDenied):
        publish_pipeline(pipeline, world.bob, name="p", version="1.0.0", title="P")  # bob is an editor
    with pytest.raises(ValidationError) as caught:
        publish_pipeline(pipeline, world.alice, name="Bad Name", version="1.0.0", title="P", visibility="galaxy")
    assert set(caught.value.message_dict) == {"name", "visibility"}

    app = publish_pipeline(pipeline, world.alice, name="p", version="1.0.0", title="P", visibility="public").app
    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 404  # not approved yet
    App.objects.filter(pk=app.pk).update(approved=True)  # staff approve it in the admin
    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 200


@pytest.mark.django_db
def test_a_new_version_leaves_the_installed_one_alone(world):
    app = shared_iris(world)
    first = app.latest
    installation = install(first, world.project_b, world.charlie, name="flowers")
    pipeline = Pipeline.objects.get(project=world.project_a, name="iris")
    pipeline.spec["nodes"][1]["args"]["test_size"] = 0.25
    pipeline.save()
    publish_pipeline(pipeline, world.alice, name="iris-pipeline", version="1.1.0", title="Iris pipeline",
                     visibility="shared", share_with=[world.project_b])  # fmt: skip

    installation.refresh_from_db()
    assert installation.app_version == first
    assert resolve_app_version(world.charlie, world.project_b, app.pk).version == "1.1.0"
    assert Pipeline.objects.get(project=world.project_b, name="flowers").spec["nodes"][1]["args"]["test_size"] == 0.3


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_member_of_the_shared_project_installs_and_runs_it(live_asgi, tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.SITE_URL = live_asgi.url
    agent = AgentProcess(tmp_path, env={"SITE_URL": live_asgi.url})
    agent.start()
    try:
        alice, charlie = UserFactory(username="alice"), UserFactory(username="charlie")
        project_a = ProjectFactory(owner=alice, slug="project-a")
        project_b = ProjectFactory(owner=charlie, slug="project-b")
        pipeline = iris_pipeline(project_a, alice)
        version = publish_pipeline(pipeline, alice, name="iris-pipeline", version="1.0.0", title="Iris",
                                   visibility="shared", share_with=[project_b])  # fmt: skip
        installation = install(resolve_app_version(charlie, project_b, version.app.pk), project_b, charlie)
        [installed] = installation.objects_of("pipelines")

        run = drive(start_run(installed, charlie), timeout=300)

        assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
        assert run.project == project_b
    finally:
        agent.stop()
