"""Publishing an inference service (the model version it serves, shipped in the bundle, and its settings) and a
notebook (its settings and starter files) as apps: shared with a chosen project, whose member installs them; a third
project gets 404; only a project admin publishes; public waits for staff approval; a new version never changes the
installed one."""

from __future__ import annotations

import io
import json

import joblib
import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from apps.appstore.models import App, Installation
from apps.appstore.publish import notebook_files, publish_notebook, publish_service
from apps.appstore.services import bundle_of, uninstall
from apps.models import artifacts
from apps.models.models import RegisteredModel
from apps.models.registry import version_by_alias
from apps.notebooks import workspace
from apps.notebooks.models import Notebook
from apps.notebooks.services import create_notebook
from apps.serving.models import InferenceService
from apps.serving.replicas import storage_path
from tests.conftest import user_client
from tests.factories import ProjectFactory, UserFactory
from tests.serving.factories import (  # noqa: F401 (fixtures: artifact_store, fast_serving, svc_agent)
    artifact_store,
    fast_serving,
    iris_bytes,
    register,
    service,
    svc_agent,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("artifact_store")]


def iris_service(world, content: bytes | None = None) -> InferenceService:
    version = register(world.project_a, world.alice, content or iris_bytes())
    return service(
        world.project_a, world.alice, name="iris", registered_model=version.registered_model, model_version=version,
        framework="sklearn", memory_bytes=512 * 2**20, max_replicas=2, description="Iris species from four numbers.",
    )  # fmt: skip


def share_service(world, svc: InferenceService, version: str = "1.0.0") -> App:
    made = publish_service(
        svc, world.alice, name="iris-service", version=version, title="Iris service", visibility="shared",
        share_with=[world.project_b],
    )  # fmt: skip
    return made.app


def install_as_charlie(world, app: App, name: str = "flowers") -> Installation:
    body = {"project": "project-b", "app": app.pk, "name": name}
    response = user_client(world.charlie).post("/api/v1/installations/", body, format="json")
    assert response.status_code == 201, response.content
    return Installation.objects.get(pk=response.json()["id"])


def test_a_service_publishes_the_model_it_serves_and_its_settings(world):
    svc = iris_service(world)
    app = share_service(world, svc)
    files = bundle_of(app.latest).files
    assert set(files) == {"model/model.joblib"}
    assert joblib.load(io.BytesIO(files["model/model.joblib"])).predict([[5.1, 3.5, 1.4, 0.2]]).tolist() == [0]
    [model] = app.latest.spec["models"]
    assert (model["name"], model["files"], model["alias"]) == ("{{ install }}-model", ["model/model.joblib"], "staging")
    [entry] = app.latest.spec["services"]
    assert entry["framework"] == "sklearn"
    assert (entry["memory"], entry["max_replicas"], entry["alias"]) == ("512Mi", 2, "staging")
    assert app.latest.metadata["category"] == "serving"


def test_the_shared_project_installs_the_service_with_its_model_and_a_third_gets_404(world):
    app = share_service(world, iris_service(world))
    dave = UserFactory(username="dave")
    ProjectFactory(owner=dave, slug="project-c")
    assert user_client(dave).get(f"/api/v1/apps/{app.pk}/").status_code == 404
    client = user_client(dave)
    client.force_login(dave)
    assert client.get(reverse("appstore:app-detail", kwargs={"pk": app.pk})).status_code == 404

    installation = install_as_charlie(world, app)

    model = RegisteredModel.objects.get(project=world.project_b, name="flowers-model")
    shipped = version_by_alias(model, "staging")
    assert shipped.version == 1
    with artifacts.open_file(f"{storage_path(shipped.source)}/model.joblib") as fh:
        assert fh.read() == bundle_of(app.latest).files["model/model.joblib"]
    served = InferenceService.objects.get(project=world.project_b, name="flowers")
    assert (served.registered_model, served.follow_alias, served.framework) == (model, "staging", "sklearn")
    assert served.memory_bytes == 512 * 2**20
    # uninstall removes the service; the model with its shipped version is data and stays unless asked
    assert uninstall(installation) == ["models:flowers-model"]
    assert not InferenceService.objects.filter(project=world.project_b).exists()
    assert RegisteredModel.objects.filter(project=world.project_b, name="flowers-model").exists()


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # a worse model on purpose
def test_a_new_version_of_a_published_service_leaves_the_installed_one_alone(world):
    svc = iris_service(world)
    app = share_service(world, svc)
    installation = install_as_charlie(world, app)
    old = bundle_of(app.latest).files["model/model.joblib"]
    newer = register(world.project_a, world.alice, iris_bytes(max_iter=5, c=0.01))
    svc.model_version = newer
    svc.save()
    share_service(world, svc, version="1.1.0")
    with pytest.raises(ValidationError):  # the same number with other bytes
        share_service(world, svc, version="1.0.0")

    installation.refresh_from_db()
    assert installation.app_version.version == "1.0.0"
    model = RegisteredModel.objects.get(project=world.project_b, name="flowers-model")
    assert model.versions.count() == 1
    with artifacts.open_file(f"{storage_path(model.versions.get().source)}/model.joblib") as fh:
        assert fh.read() == old
    assert bundle_of(app.versions.get(version="1.1.0")).files["model/model.joblib"] != old


def test_a_failed_install_of_a_service_app_leaves_no_model_files(world, artifact_store):  # noqa: F811
    app = share_service(world, iris_service(world))
    InferenceService.objects.create(project=world.project_b, name="flowers", created_by=world.charlie)  # name taken
    before = sorted(p for p in artifact_store.rglob("*") if p.is_file())
    response = user_client(world.charlie).post(
        "/api/v1/installations/", {"project": "project-b", "app": app.pk, "name": "flowers"}, format="json"
    )
    assert response.status_code == 400
    assert "spec.services[0].name" in json.dumps(response.json())
    assert not RegisteredModel.objects.filter(project=world.project_b).exists()
    assert sorted(p for p in artifact_store.rglob("*") if p.is_file()) == before


def test_only_an_admin_publishes_a_service_that_serves_a_model(world):
    svc = iris_service(world)
    with pytest.raises(PermissionDenied):
        publish_service(svc, world.bob, name="s", version="1.0.0", title="S")  # bob is an editor
    custom = service(world.project_a, world.alice, name="custom", framework="custom", command=["x", "{port}"])
    with pytest.raises(ValidationError) as caught:
        publish_service(custom, world.alice, name="s", version="1.0.0", title="S")
    assert list(caught.value.message_dict) == ["service"]
    waiting = service(world.project_a, world.alice, name="waiting", registered_model=svc.registered_model,
                      follow_alias="production")  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        publish_service(waiting, world.alice, name="s", version="1.0.0", title="S")
    assert "serves no model version yet" in caught.value.message_dict["service"][0]


@pytest.fixture
def notebook(world, settings, tmp_path) -> Notebook:
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    made = create_notebook(world.project_a, world.alice, name="eda", cpu="0.5", memory="1Gi")
    home = workspace.prepare(world.project_a, world.alice)
    (home / "eda.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (home / "data").mkdir()
    (home / "data" / "sample.csv").write_text("a,b\n1,2\n")
    (home / ".secret").write_text("token")
    return made


def test_a_notebook_publishes_with_the_files_picked_and_public_waits_for_approval(world, notebook):
    assert notebook_files(notebook) == ["data/sample.csv", "eda.ipynb"]  # hidden files and the shared link left out
    with pytest.raises(ValidationError) as caught:
        publish_notebook(notebook, world.alice, files=[".secret"], name="eda", version="1.0.0", title="EDA")
    assert list(caught.value.message_dict) == ["files"]
    with pytest.raises(PermissionDenied):
        publish_notebook(notebook, world.bob, files=["eda.ipynb"], name="eda", version="1.0.0", title="EDA")
    made = publish_notebook(
        notebook, world.alice, files=["eda.ipynb", "data/sample.csv"], name="eda", version="1.0.0", title="EDA",
        visibility="public",
    )  # fmt: skip
    app = made.app
    assert set(bundle_of(made).files) == {"notebooks/eda.ipynb", "notebooks/sample.csv"}
    [entry] = made.spec["notebooks"]
    assert (entry["cpu"], entry["memory"]) == ("0.50", "1024Mi")
    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 404  # not approved yet
    App.objects.filter(pk=app.pk).update(approved=True)  # the admin's "approve" action
    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 200

    response = user_client(world.charlie).post(
        "/api/v1/installations/", {"project": "project-b", "app": app.pk, "name": "my-eda"}, format="json"
    )
    assert response.status_code == 201, response.content
    installed = Notebook.objects.get(project=world.project_b)
    assert (installed.owner, installed.name, str(installed.cpu)) == (world.charlie, "my-eda", "0.50")
    folder = workspace.home_dir(world.project_b, world.charlie) / "my-eda"
    assert (folder / "sample.csv").read_text() == "a,b\n1,2\n"
    assert json.loads((folder / "eda.ipynb").read_text())["nbformat"] == 4


def test_the_publish_pages(world, notebook):
    svc = iris_service(world)
    for user, status in ((world.alice, 200), (world.bob, 403), (world.charlie, 404)):
        client = user_client(user)
        client.force_login(user)
        url = reverse("appstore:service-publish", kwargs={"project": "project-a", "pk": svc.pk})
        assert client.get(url).status_code == status
        url = reverse("appstore:notebook-publish", kwargs={"project": "project-a", "pk": notebook.pk})
        assert client.get(url).status_code == status
    client = user_client(world.alice)
    client.force_login(world.alice)
    picks = client.get(reverse("appstore:app-install", kwargs={"project": "project-a"})).content.decode()
    assert reverse("appstore:service-publish", kwargs={"project": "project-a", "pk": svc.pk}) in picks
    assert reverse("appstore:notebook-publish", kwargs={"project": "project-a", "pk": notebook.pk}) in picks
    url = reverse("appstore:notebook-publish", kwargs={"project": "project-a", "pk": notebook.pk})
    page = client.get(url).content.decode()
    assert 'value="eda.ipynb"' in page
    assert 'value="data/sample.csv"' in page
    form = {"name": "eda", "version": "1.0.0", "title": "EDA", "visibility": "project", "files": ["eda.ipynb"]}
    assert client.post(url, {**form, "files": []}).status_code == 200  # files are required: the form again
    response = client.post(url, form)
    assert response.status_code == 302
    assert App.objects.get(name="eda").latest.spec["notebooks"][0]["files"] == ["notebooks/eda.ipynb"]
    url = reverse("appstore:service-publish", kwargs={"project": "project-a", "pk": svc.pk})
    bad = client.post(url, {"name": "Bad Name", "version": "1.0.0", "title": "S", "visibility": "project"})
    assert bad.status_code == 200
    assert "invalid-feedback" in bad.content.decode() or "is-invalid" in bad.content.decode()
    response = client.post(url, {"name": "iris-service", "version": "1.0.0", "title": "S", "visibility": "project"})
    assert response.status_code == 302
    assert App.objects.get(name="iris-service").latest.spec["services"][0]["name"] == "{{ install }}"


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("svc_agent")
def test_the_installed_service_serves_the_shipped_model(world):
    from apps.appstore.services import install
    from apps.serving.tasks import follow_alias
    from tests.serving.factories import drive, post_json, ready_replicas

    app = share_service(world, iris_service(world))
    installation = install(app.latest, world.project_b, world.charlie, name="flowers")
    [served] = installation.objects_of("services")
    [model] = installation.objects_of("models")
    follow_alias(model.pk, "staging")  # what the worker does once an alias is set
    served = drive(served, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(served.current_revision)
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
    body = {"inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP64", "data": rows}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{served.name}/infer", body)
    assert status == 200, answer
    assert next(o["data"] for o in answer["outputs"] if o["name"] == "predict") == [0, 2]


def test_publishing_through_the_api(world, notebook):
    svc = iris_service(world)
    body = {"project": "project-a", "kind": "service", "object": svc.pk, "name": "iris-service", "version": "1.0.0",
            "title": "Iris service", "visibility": "shared", "share_with": ["project-b"]}  # fmt: skip
    assert user_client(world.bob).post("/api/v1/apps/publish/", body, format="json").status_code == 403  # an editor
    theirs = user_client(world.charlie).post("/api/v1/apps/publish/", body, format="json")
    assert (theirs.status_code, list(theirs.json())) == (400, ["project"])  # not a project charlie can access
    other = InferenceService.objects.create(project=world.project_b, name="other", created_by=world.charlie)
    client = user_client(world.alice)
    assert client.post("/api/v1/apps/publish/", {**body, "object": other.pk}, format="json").status_code == 404
    bad = client.post("/api/v1/apps/publish/", {**body, "name": "Bad Name", "share_with": ["nowhere"]}, format="json")
    assert (bad.status_code, sorted(bad.json())) == (400, ["share_with"])
    bad = client.post("/api/v1/apps/publish/", {**body, "name": "Bad Name"}, format="json")
    assert (bad.status_code, sorted(bad.json())) == (400, ["name"])

    response = client.post("/api/v1/apps/publish/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["version"] == "1.0.0"
    app = App.objects.get(name="iris-service")
    assert list(app.shared_with.all()) == [world.project_b]
    assert user_client(world.charlie).get(f"/api/v1/apps/{app.pk}/").status_code == 200

    notebook_body = {"project": "project-a", "kind": "notebook", "object": notebook.pk, "name": "eda",
                     "version": "1.0.0", "title": "EDA", "files": ["eda.ipynb"]}  # fmt: skip
    response = client.post("/api/v1/apps/publish/", notebook_body, format="json")
    assert response.status_code == 201, response.content
    missing = client.post("/api/v1/apps/publish/", {**notebook_body, "version": "1.0.1", "files": ["nope.ipynb"]},
                          format="json")  # fmt: skip
    assert (missing.status_code, list(missing.json())) == (400, ["files"])
