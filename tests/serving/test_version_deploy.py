""" "Deploy this version" from the registry (issue 26, point 5): the version page links editors to a page that deploys
the version to a new service (a free name proposed) or switches one of the model's services to it (pinned: it stops
following an alias). Field errors come back on the page (400); viewers see no button and get 403; outsiders 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.models.registry import set_alias
from apps.projects.models import Role
from apps.serving.models import InferenceService, Revision
from apps.serving.services import create_service
from tests.factories import UserFactory, add_member
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, register  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("artifact_store")]


@pytest.fixture
def versions(world):
    heartbeat_agent()
    return register(world.project_a, world.alice, iris_bytes()), register(world.project_a, world.alice, iris_bytes(c=2))


def deploy_url(version, project: str = "project-a") -> str:
    return reverse("serving:version-deploy", kwargs={"project": project, "pk": version.pk})


def version_url(version) -> str:
    return reverse("models:version-detail", kwargs={"project": "project-a", "pk": version.pk})


def test_editors_find_the_button_on_the_version_page_and_viewers_do_not(client, world, versions):
    v1, _v2 = versions
    client.force_login(world.bob)
    assert f'href="{deploy_url(v1)}"' in client.get(version_url(v1)).content.decode()
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    html = client.get(version_url(v1)).content.decode()
    assert "Deploy this version" not in html
    assert client.get(deploy_url(v1)).status_code == 403
    assert client.post(deploy_url(v1), {"name": "sneaky"}).status_code == 403
    assert not InferenceService.objects.filter(name="sneaky").exists()


def test_an_outsider_gets_a_404(client, world, versions):
    client.force_login(world.charlie)
    assert client.get(deploy_url(versions[0])).status_code == 404
    assert client.post(deploy_url(versions[0]), {"name": "x"}).status_code == 404
    assert client.get(deploy_url(versions[0], project="project-b")).status_code == 404


def test_a_new_service_is_created_pinned_to_the_version_and_rolls_out(client, world, versions):
    _v1, v2 = versions
    client.force_login(world.bob)
    html = client.get(deploy_url(v2)).content.decode()
    assert 'name="name" value="iris-classifier"' in html  # the model's name, free
    assert "No service serves this model yet." in html

    response = client.post(deploy_url(v2), {"name": "iris-api"})
    service = InferenceService.objects.get(name="iris-api")
    assert response.status_code == 302
    assert response["Location"] == reverse("serving:service-detail", kwargs={"project": "project-a", "pk": service.pk})
    assert service.model_version == v2
    assert service.created_by == world.bob
    revision = service.revisions.get()
    assert revision.model_version == v2
    assert revision.status == Revision.Status.ROLLING_OUT


def test_a_taken_or_bad_name_comes_back_on_the_form(client, world, versions):
    create_service(world.project_a, world.alice, name="iris-classifier", registered_model=versions[0].registered_model,
                   model_version=1)  # fmt: skip
    client.force_login(world.bob)
    assert 'name="name" value="iris-classifier-v2"' in client.get(deploy_url(versions[1])).content.decode()
    response = client.post(deploy_url(versions[1]), {"name": "iris-classifier"})
    assert response.status_code == 400
    assert "This project already has a service named “iris-classifier”." in response.content.decode()
    response = client.post(deploy_url(versions[1]), {"name": "Not A Slug!"})
    assert response.status_code == 400
    assert 'class="form-control is-invalid" id="deploy-name"' in response.content.decode()


def test_a_service_of_the_model_switches_to_the_version_and_stops_following_its_alias(client, world, versions):
    v1, v2 = versions
    set_alias(v1.registered_model, "production", 1)
    service = create_service(world.project_a, world.alice, name="prod", registered_model=v1.registered_model,
                             follow_alias="production")  # fmt: skip
    client.force_login(world.bob)
    html = client.get(deploy_url(v2)).content.decode()
    assert 'data-target="prod"' in html
    assert "prod rolls out v2 and stops following @production" in html  # said in the confirm dialog
    assert 'data-confirm-title="Deploy to prod?"' in html

    response = client.post(deploy_url(v2), {"service": service.pk})
    assert response.status_code == 302
    service.refresh_from_db()
    assert (service.model_version, service.follow_alias) == (v2, "")
    assert service.revisions.order_by("-number").first().model_version == v2


def test_a_service_of_another_model_is_refused(client, world, versions):
    other = register(world.project_a, world.alice, iris_bytes(), model_name="other")
    service = create_service(world.project_a, world.alice, name="other", registered_model=other.registered_model,
                             model_version=1)  # fmt: skip
    client.force_login(world.bob)
    response = client.post(deploy_url(versions[0]), {"service": service.pk})
    assert response.status_code == 400
    assert "Choose a service of this model." in response.content.decode()
    service.refresh_from_db()
    assert service.model_version == other
