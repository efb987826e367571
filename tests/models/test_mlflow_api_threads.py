"""apps/models/mlflow_api/asgi.py: the MLflow API's long-lived threads skip Django's health check (`SELECT 1`) of a
connection that the thread's previous request ended with less than HEALTH_FRESH_S ago, and check it otherwise."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from apps.models.mlflow_api import asgi


@pytest.fixture
def checked_connection(db):
    connection.ensure_connection()
    connection.health_check_enabled = True
    connection.health_check_done = False
    yield connection
    asgi._ended.__dict__.clear()


def test_a_connection_the_last_request_just_ended_with_is_not_checked_again(checked_connection):
    asgi._ended.at = time.monotonic()
    asgi._skip_fresh_health_checks()
    assert checked_connection.health_check_done is True


def test_a_connection_idle_for_longer_is_checked(checked_connection):
    asgi._ended.at = time.monotonic() - asgi.HEALTH_FRESH_S - 0.5
    asgi._skip_fresh_health_checks()
    assert checked_connection.health_check_done is False


def test_the_first_request_of_a_thread_is_checked(checked_connection):
    asgi._skip_fresh_health_checks()
    assert checked_connection.health_check_done is False
