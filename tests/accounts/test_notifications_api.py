"""/api/v1/notifications/: your own notifications, and marking them read."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from apps.accounts.models import Notification
from apps.accounts.services import notify

LIST_URL = reverse("api:notification-list")
MARK_READ_URL = reverse("api:notification-mark-read")


@pytest.fixture
def alice_api(world, api) -> APIClient:
    api.force_authenticate(world.alice)
    return api


def unread(user) -> set[str]:
    return set(Notification.objects.filter(user=user, read_at__isnull=True).values_list("message", flat=True))


def test_list_shows_only_my_notifications_newest_first(alice_api, world):
    notify(world.alice, "first", url="/p/project-a/")
    notify(world.bob, "for bob")
    notify(world.alice, "second")

    response = alice_api.get(LIST_URL)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [n["message"] for n in body["results"]] == ["second", "first"]
    assert body["results"][1]["url"] == "/p/project-a/"
    assert body["results"][1]["read_at"] is None
    assert set(body["results"][0]) == {"id", "message", "url", "created_at", "read_at"}


def test_someone_elses_notification_is_404(alice_api, world):
    bobs = notify(world.bob, "for bob")

    assert alice_api.get(reverse("api:notification-detail", kwargs={"pk": bobs.pk})).status_code == 404


def test_list_filters_unread(alice_api, world):
    read = notify(world.alice, "read")
    notify(world.alice, "unread")
    Notification.objects.filter(pk=read.pk).update(read_at=read.created_at)

    response = alice_api.get(LIST_URL, {"read_at__isnull": "true"})

    assert [n["message"] for n in response.json()["results"]] == ["unread"]


def test_mark_read_with_ids_marks_only_those(alice_api, world):
    one = notify(world.alice, "one")
    notify(world.alice, "two")
    notify(world.alice, "three")

    response = alice_api.post(MARK_READ_URL, {"ids": [one.pk]}, format="json")

    assert response.status_code == 200
    assert response.json() == {"marked": 1, "unread": 2}
    assert unread(world.alice) == {"two", "three"}


def test_mark_read_without_ids_marks_all_mine(alice_api, world):
    notify(world.alice, "one")
    notify(world.alice, "two")
    notify(world.bob, "bob's")

    response = alice_api.post(MARK_READ_URL, {}, format="json")

    assert response.status_code == 200
    assert response.json() == {"marked": 2, "unread": 0}
    assert unread(world.alice) == set()
    assert unread(world.bob) == {"bob's"}


def test_mark_read_ignores_someone_elses_ids(alice_api, world):
    mine = notify(world.alice, "mine")
    bobs = notify(world.bob, "bob's")

    response = alice_api.post(MARK_READ_URL, {"ids": [bobs.pk]}, format="json")

    assert response.json() == {"marked": 0, "unread": 1}
    assert unread(world.bob) == {"bob's"}
    assert unread(world.alice) == {mine.message}


def test_mark_read_twice_marks_nothing_the_second_time(alice_api, world):
    one = notify(world.alice, "one")
    alice_api.post(MARK_READ_URL, {"ids": [one.pk]}, format="json")
    one.refresh_from_db()
    first = one.read_at

    response = alice_api.post(MARK_READ_URL, {"ids": [one.pk]}, format="json")

    assert response.json() == {"marked": 0, "unread": 0}
    one.refresh_from_db()
    assert one.read_at == first


def test_mark_read_with_an_empty_list_marks_nothing(alice_api, world):
    notify(world.alice, "one")

    response = alice_api.post(MARK_READ_URL, {"ids": []}, format="json")

    assert response.json() == {"marked": 0, "unread": 1}


def test_mark_read_rejects_ids_that_are_not_numbers(alice_api, world):
    notify(world.alice, "one")

    response = alice_api.post(MARK_READ_URL, {"ids": ["one"]}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["ids"]
    assert unread(world.alice) == {"one"}


def test_mark_read_updates_the_count_on_the_pages(alice_api, world, client):
    notify(world.alice, "one")
    client.force_login(world.alice)
    assert client.get(reverse("accounts:notifications")).context["unread_notifications"] == 1

    alice_api.post(MARK_READ_URL, {}, format="json")

    assert client.get(reverse("accounts:notifications")).context["unread_notifications"] == 0
