"""Register custom job templates and images from the pages (issue 26, point 5). A template goes through the API's
serializer and jobs.services.create_template (a slug that exists gets its next version; a bad schema or command is a
field error with a 400); images are registered with their registry credentials (the password never shown) and
removed after the confirm dialog. Viewers see no buttons and get 403; outsiders 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.jobs.models import Image, JobTemplate
from apps.projects.models import Role
from tests import factories

pytestmark = pytest.mark.django_db

TEMPLATE = {
    "slug": "train-xgb", "name": "Train XGBoost", "category": "training", "description": "Fits a booster.",
    "image": "registry.example.com/ml/xgb:1.7", "command": "python -m trainer --verbose 'two words'",
    "args_schema": '{"type": "object", "properties": {"rounds": {"type": "integer", "default": 10}}}',
    "cpu": "2", "memory": "4Gi", "gpu": "0", "side_effects": "",
}  # fmt: skip


def url(name: str, project: str = "project-a", **kwargs) -> str:
    return reverse(f"jobs:{name}", kwargs={"project": project, **kwargs})


def test_an_editor_registers_a_template_and_then_its_next_version(client, world):
    client.force_login(world.bob)
    assert url("template-create") in client.get(url("template-list")).content.decode()
    response = client.post(url("template-create"), TEMPLATE)
    template = JobTemplate.objects.get(project=world.project_a, slug="train-xgb")
    assert response["Location"] == url("template-detail", pk=template.pk)
    assert template.command == ["python", "-m", "trainer", "--verbose", "two words"]
    assert template.resources == {"cpu": "2", "memory": "4Gi", "gpu": "0"}
    assert template.args_schema["properties"]["rounds"]["type"] == "integer"
    assert (template.version, template.category, template.side_effects) == (1, "training", False)

    client.post(url("template-create"), {**TEMPLATE, "command": "python -m trainer2", "side_effects": "on"})
    second = JobTemplate.objects.get(project=world.project_a, slug="train-xgb", version=2)
    assert (second.command, second.side_effects) == (["python", "-m", "trainer2"], True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"args_schema": "{not json"}, "Not JSON:"),
        ({"args_schema": '{"type": "object", "properties": {"n": {"type": "bogus"}}}'}, "bogus"),
        ({"command": "python 'unclosed"}, "The command cannot be split"),
        ({"cpu": "-3"}, "“-3” is not a number from 0 to 1000000."),
        ({"slug": "Not a slug"}, "Enter a valid “slug”"),
    ],
)
def test_bad_input_comes_back_on_the_form(client, world, change, message):
    client.force_login(world.bob)
    response = client.post(url("template-create"), {**TEMPLATE, **change})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not JobTemplate.objects.filter(project=world.project_a).exists()


def test_images_are_registered_listed_and_removed(client, world):
    client.force_login(world.bob)
    data = {"name": "registry.example.com/ml/xgb:1.7", "description": "XGBoost", "registry": "registry.example.com",
            "registry_username": "robot", "registry_password": "s3cret-pass"}  # fmt: skip
    response = client.post(url("image-list"), data)
    assert response["Location"] == url("image-list")
    image = Image.objects.get(project=world.project_a)
    assert (image.registry_username, image.registry_password) == ("robot", "s3cret-pass")
    html = client.get(url("image-list")).content.decode()
    assert 'data-image="registry.example.com/ml/xgb:1.7"' in html
    assert "s3cret-pass" not in html
    assert 'data-confirm-title="Remove this image?"' in html

    response = client.post(url("image-list"), {**data, "registry_password": ""})
    assert response.status_code == 400
    assert "This project already has the image" in response.content.decode()
    response = client.post(url("image-list"), {"name": "other:1", "registry_password": "x"})
    assert response.status_code == 400
    assert "A registry password needs a username." in response.content.decode()

    client.post(url("image-delete", pk=image.pk))
    assert not Image.objects.filter(project=world.project_a).exists()


def test_built_in_images_cannot_be_removed(client, world):
    builtin = Image.objects.create(project=None, name="python:3.11-slim")
    client.force_login(world.alice)
    assert client.post(url("image-delete", pk=builtin.pk)).status_code == 403
    assert Image.objects.filter(pk=builtin.pk).exists()


def test_viewers_see_no_buttons_and_get_403_outsiders_404(client, world):
    image = Image.objects.create(project=world.project_a, name="mine:1")
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    assert url("template-create") not in client.get(url("template-list")).content.decode()
    html = client.get(url("image-list")).content.decode()
    assert url("image-delete", pk=image.pk) not in html
    assert "Register an image" not in html
    assert client.get(url("template-create")).status_code == 403
    assert client.post(url("template-create"), TEMPLATE).status_code == 403
    assert client.post(url("image-list"), {"name": "x:1"}).status_code == 403
    assert client.post(url("image-delete", pk=image.pk)).status_code == 403
    client.force_login(world.charlie)
    assert client.post(url("image-delete", pk=image.pk)).status_code == 404
    assert client.get(url("image-list")).status_code == 404
    assert client.post(url("template-create"), TEMPLATE).status_code == 404
    assert list(Image.objects.values_list("name", flat=True)) == ["mine:1"]
    assert not JobTemplate.objects.filter(project=world.project_a).exists()
