"""`services.update_dataset`: a dataset's new name must be free in its project (the API's PATCH calls it)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.datasets.models import Dataset
from apps.datasets.services import update_dataset
from tests.conftest import user_client
from tests.factories import dataset


def test_a_dataset_takes_a_free_name_and_new_fields(world):
    ds = dataset(world.project_a, world.alice, name="iris")

    update_dataset(ds, name="flowers", description="Fisher's")

    assert Dataset.objects.filter(pk=ds.pk).values_list("name", "description").get() == ("flowers", "Fisher's")


def test_a_name_taken_in_the_project_is_refused_on_the_name_field(world):
    dataset(world.project_a, world.alice, name="iris")
    ds = dataset(world.project_a, world.alice, name="wine")

    with pytest.raises(ValidationError) as caught:
        update_dataset(ds, name="iris")

    assert caught.value.message_dict == {"name": ["A dataset named “iris” exists in this project."]}
    assert Dataset.objects.get(pk=ds.pk).name == "wine"


def test_keeping_its_own_name_or_a_name_used_in_another_project_is_fine(world):
    dataset(world.project_b, world.charlie, name="iris")
    ds = dataset(world.project_a, world.alice, name="iris")

    update_dataset(ds, name="iris", description="same name")

    assert Dataset.objects.get(pk=ds.pk).description == "same name"


def test_the_api_answers_the_services_message(world):
    dataset(world.project_a, world.alice, name="iris")
    ds = dataset(world.project_a, world.alice, name="wine")

    response = user_client(world.alice).patch(f"/api/v1/datasets/{ds.pk}/", {"name": "iris"}, format="json")

    assert response.status_code == 400
    assert response.json()["name"] == ["A dataset named “iris” exists in this project."]
