"""Kubeconfigs and registry passwords are unreadable in the database (acceptance 3), and survive a key rotation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings

from apps.jobs.models import Image
from apps.runtime.models import Cluster
from tests.runtime.factories import CA_DATA, ClusterFactory, kubeconfig_yaml

pytestmark = pytest.mark.django_db

TOKEN = "kube-token-5f2b9c1e7d3a48e6b0c4a9f1d2e3b4c5"
PASSWORD = "hunter2-registry-Pa55word!"
ENCRYPTED_FIELDS = [(Cluster, "kubeconfig"), (Image, "registry_password")]


def raw_column(model: type, column: str, pk: int) -> str:
    """The value as stored, read with SQL (no model field in the way)."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name(column)} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def forget_keys() -> None:
    """The field caches its Fernet keys (derived from SECRET_KEY): drop them so that a settings change applies."""
    for model, name in ENCRYPTED_FIELDS:
        field = model._meta.get_field(name)
        field.__dict__.pop("keys", None)
        field.__dict__.pop("f", None)


@pytest.fixture
def fresh_keys() -> Iterator[None]:
    forget_keys()
    yield
    forget_keys()


def test_the_kubeconfig_column_holds_no_part_of_the_plaintext():
    text = kubeconfig_yaml(server="https://k8s.internal.example:6443", token=TOKEN)
    cluster = ClusterFactory(name="secret-lab", kubeconfig=text)

    stored = raw_column(Cluster, "kubeconfig", cluster.pk)

    assert stored
    assert stored != text
    for fragment in (TOKEN, TOKEN[-12:], "k8s.internal.example", "current-context", "apiVersion", CA_DATA[:16]):
        assert fragment not in stored
    assert stored.startswith("gAAAAA")  # a Fernet token
    assert Cluster.objects.get(pk=cluster.pk).kubeconfig == text


def test_the_registry_password_column_holds_no_part_of_the_plaintext(world):
    image = Image.objects.create(
        project=world.project_a, name="registry.example.com/team/train:1", registry="registry.example.com",
        registry_username="robot", registry_password=PASSWORD,
    )  # fmt: skip

    stored = raw_column(Image, "registry_password", image.pk)

    assert stored.startswith("gAAAAA")
    for fragment in (PASSWORD, "hunter2", "Pa55word"):
        assert fragment not in stored
    assert raw_column(Image, "registry_username", image.pk) == "robot"  # only the secret is encrypted
    assert Image.objects.get(pk=image.pk).registry_password == PASSWORD


def test_after_a_key_rotation_the_old_key_in_the_fallbacks_still_decrypts(settings, fresh_keys):
    text = kubeconfig_yaml(token=TOKEN)
    old_key = settings.SECRET_KEY
    cluster = ClusterFactory(kubeconfig=text)
    before = raw_column(Cluster, "kubeconfig", cluster.pk)

    with override_settings(SECRET_KEY="a-brand-new-key-" + "x" * 40, SECRET_KEY_FALLBACKS=[old_key]):
        forget_keys()
        assert Cluster.objects.get(pk=cluster.pk).kubeconfig == text
        # Saving again re-encrypts with the new key: the old one can then be retired.
        Cluster.objects.get(pk=cluster.pk).save()
        assert raw_column(Cluster, "kubeconfig", cluster.pk) != before

    with override_settings(SECRET_KEY="a-brand-new-key-" + "x" * 40, SECRET_KEY_FALLBACKS=[]):
        forget_keys()
        assert Cluster.objects.get(pk=cluster.pk).kubeconfig == text


def test_without_the_old_key_the_plaintext_is_not_recovered(settings, fresh_keys):
    cluster = ClusterFactory(kubeconfig=kubeconfig_yaml(token=TOKEN))

    with override_settings(SECRET_KEY="an-unrelated-key-" + "y" * 40, SECRET_KEY_FALLBACKS=[]):
        forget_keys()
        value = Cluster.objects.get(pk=cluster.pk).kubeconfig

    # The library hands back the ciphertext when no key fits (it does not raise): never the secret.
    assert TOKEN not in value
    assert value == raw_column(Cluster, "kubeconfig", cluster.pk)
