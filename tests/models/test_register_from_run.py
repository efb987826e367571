"""Register a model from a tracking run's page (issue 26, point 5): the run's model folders are offered, a new name
makes a registered model, an existing one gets the next version; bad input comes back on the form (400); viewers
see no form and get 403, outsiders 404."""

from __future__ import annotations

import io

import pytest
from django.urls import reverse

from apps.models import artifacts
from apps.models.models import ModelVersion, RegisteredModel
from apps.models.register import model_sources
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, registered_model, tracking_run
from tests.serving.factories import artifact_store  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("artifact_store")]


@pytest.fixture
def run(world):
    run = tracking_run(world.project_a, world.alice, name="train")
    base = run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    artifacts.save(f"{base}/model/model.joblib", io.BytesIO(b"not really a model"))
    artifacts.save(f"{base}/classifier/MLmodel", io.BytesIO(b"flavors: {}\n"))
    artifacts.save(f"{base}/plots/roc.png", io.BytesIO(b"png"))
    artifacts.save(f"{base}/metrics.json", io.BytesIO(b"{}"))
    return run


def urls(run, project: str = "project-a") -> tuple[str, str]:
    kwargs = {"project": project, "pk": run.pk}
    return reverse("models:run-detail", kwargs=kwargs), reverse("models:run-register", kwargs=kwargs)


def test_the_runs_model_folders_are_offered(run):
    assert model_sources(run) == [("classifier", "artifacts/classifier/"), ("model", "artifacts/model/")]


def test_an_editor_registers_a_new_model_then_a_second_version(client, world, run):
    page, post = urls(run)
    client.force_login(world.bob)
    html = client.get(page).content.decode()
    assert f'action="{post}"' in html
    assert '<option value="model">artifacts/model/</option>' in html

    response = client.post(post, {"name": "churn", "source": "model"})
    version = ModelVersion.objects.get(registered_model__name="churn")
    assert response.status_code == 302
    assert response["Location"] == reverse("models:version-detail", kwargs={"project": "project-a", "pk": version.pk})
    assert (version.version, version.run, version.user_id_text) == (1, run, "bob")
    assert version.source == f"{run.artifact_uri}/model"

    registered_model(world.project_a, "existing")
    client.post(post, {"name": "existing", "source": "classifier"})
    client.post(post, {"name": "existing", "source": "model"})
    existing = RegisteredModel.objects.get(name="existing").versions.order_by("version")
    assert [(v.version, v.source.rsplit("/", 1)[1]) for v in existing] == [(1, "classifier"), (2, "model")]
    html = client.get(page).content.decode()
    assert "churn v1" in html
    assert 'value="churn"' in html  # the form starts from a model the run registered


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "", "source": "model"}, "name", "Name the registered model."),
        ({"name": "m", "source": "nowhere"}, "source", "The run has no artifact “nowhere”."),
        ({"name": "m", "source": "../../etc"}, "source", "The run has no artifact “../../etc”."),
        ({"name": "m", "source": "models:/m-00000000000000000000000000000000"}, "source", "does not exist"),
    ],
)
def test_bad_input_comes_back_on_the_form(client, world, run, data, field, message):
    client.force_login(world.bob)
    response = client.post(urls(run)[1], data)
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html
    assert f'id="register-{field}"' in html
    assert '<details class="mt-2" id="register-model" open>' in html
    assert not RegisteredModel.objects.filter(name="m").exists()


def test_viewers_see_no_form_and_get_403_outsiders_404(client, world, run):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    page, post = urls(run)
    client.force_login(viewer)
    assert "Register a model" not in client.get(page).content.decode()
    assert client.post(post, {"name": "x", "source": "model"}).status_code == 403
    client.force_login(world.charlie)
    assert client.post(post, {"name": "x", "source": "model"}).status_code == 404
    assert client.post(urls(run, "project-b")[1], {"name": "x", "source": "model"}).status_code == 404
    assert not RegisteredModel.objects.filter(name="x").exists()
