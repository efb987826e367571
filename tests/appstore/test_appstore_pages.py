"""The catalogue pages, the install form generated from the parameter schema, and an installation's page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.appstore.models import Installation
from apps.appstore.services import add_version, install
from apps.jobs.models import Pipeline, PipelineRun
from tests.appstore.factories import builtin_version, tiny_bundle

pytestmark = pytest.mark.django_db


def test_the_catalogue_shows_cards_and_filters(world, client):
    builtin_version()
    add_version(tiny_bundle(), project=world.project_b)  # charlie's project's own app
    client.force_login(world.alice)
    page = client.get(reverse("appstore:app-list")).content.decode()
    assert "Tabular classification" in page
    assert "Tiny" not in page
    assert "Tabular classification" not in client.get(reverse("appstore:app-list") + "?q=zzz").content.decode()
    assert (
        "Tabular classification"
        in client.get(reverse("appstore:app-list") + "?category=classification").content.decode()
    )


def test_the_app_page_renders_the_readme_and_what_it_creates(world, client):
    version = builtin_version()
    client.force_login(world.alice)
    page = client.get(reverse("appstore:app-detail", kwargs={"pk": version.app_id})).content.decode()
    assert "<h4>Tabular classification</h4>" in page  # the README as HTML (headings shifted under the page title)
    assert "<strong>load</strong>" in page
    assert "Inference service" in page
    assert "memory: 1Gi" in page
    assert reverse("appstore:app-install", kwargs={"project": "project-a"}) + f"?app={version.app_id}" in page
    private = add_version(tiny_bundle(), project=world.project_b).app
    assert client.get(reverse("appstore:app-detail", kwargs={"pk": private.pk})).status_code == 404


def test_the_install_form_comes_from_the_schema_and_installs(world, client):
    version = builtin_version()
    client.force_login(world.bob)
    url = reverse("appstore:app-install", kwargs={"project": "project-a"}) + f"?app={version.app_id}"
    page = client.get(url).content.decode()
    assert 'name="param-model"' in page
    assert 'value="random_forest"' in page
    assert 'value="tabular-classification-iris"' in page  # the default, for the default installation name

    bad = client.post(url, {"name": "lab", "param-dataset": "lab-iris", "param-label_column": "label",
                            "param-model": "logistic_regression", "param-min_accuracy": "7"})  # fmt: skip
    assert bad.status_code == 200
    assert "less than or equal to 1" in bad.content.decode()
    assert not Installation.objects.exists()

    response = client.post(url, {"name": "lab", "param-dataset": "lab-wine", "param-label_column": "label",
                                 "param-model": "logistic_regression", "param-min_accuracy": "0.7"})  # fmt: skip
    installation = Installation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse(
        "appstore:installation-detail", kwargs={"project": "project-a", "pk": installation.pk}
    )
    assert installation.parameters["dataset"] == "lab-wine"
    again = client.post(url, {"name": "lab", "param-dataset": "lab-wine", "param-label_column": "label"})
    assert "installed in this project already" in again.content.decode()


def test_run_and_uninstall_from_the_installation_page(world, client):
    installation = install(builtin_version(), world.project_a, world.alice, name="lab")
    client.force_login(world.bob)
    kwargs = {"project": "project-a", "pk": installation.pk}
    page = client.get(reverse("appstore:installation-detail", kwargs=kwargs)).content.decode()
    assert "lab-model" in page
    assert "Waiting for a version" in page

    client.post(reverse("appstore:installation-run", kwargs=kwargs))
    assert PipelineRun.objects.get().pipeline.name == "lab"

    response = client.post(reverse("appstore:installation-uninstall", kwargs=kwargs))
    assert response.status_code == 302
    assert not Installation.objects.exists()
    assert not Pipeline.objects.exists()


def test_a_project_admin_publishes_a_pipeline_from_its_page(world, client):
    from apps.appstore.models import App
    from tests.appstore.test_publish import iris_pipeline

    pipeline = iris_pipeline(world.project_a, world.alice)
    url = reverse("appstore:pipeline-publish", kwargs={"project": "project-a", "pk": pipeline.pk})
    client.force_login(world.alice)
    assert url in client.get(reverse("appstore:app-install", kwargs={"project": "project-a"})).content.decode()
    bad = client.post(url, {"name": "iris-app", "version": "1.0.0", "title": "Iris", "visibility": "shared",
                            "share_with": "project-b, nowhere"})  # fmt: skip
    assert "No project nowhere." in bad.content.decode()
    response = client.post(url, {"name": "iris-app", "version": "1.0.0", "title": "Iris", "visibility": "shared",
                                 "share_with": "project-b"})  # fmt: skip
    app = App.objects.get(name="iris-app")
    assert response["Location"] == reverse("appstore:app-detail", kwargs={"pk": app.pk})
    assert list(app.shared_with.all()) == [world.project_b]
    client.force_login(world.bob)  # an editor: not an admin
    assert client.get(url).status_code == 403


def test_the_upgrade_page_shows_the_difference_and_applies_it(world, client):
    from apps.appstore.services import add_version

    installation = install(add_version(tiny_bundle()), world.project_a, world.alice, name="tiny")
    newer = add_version(tiny_bundle(version="1.1.0", models=[{"name": "{{ install }}-model"}]))
    client.force_login(world.bob)
    url = reverse("appstore:installation-upgrade", kwargs={"project": "project-a", "pk": installation.pk})
    page = client.get(url).content.decode()
    assert "added</span> models:tiny-model" in page
    response = client.post(url, {"version": "1.1.0"})
    assert response.status_code == 302
    installation.refresh_from_db()
    assert installation.app_version == newer
    assert {o.name for o in installation.created.all()} == {"tiny-data", "tiny", "tiny-model"}
