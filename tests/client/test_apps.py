"""The app store from the SDK and `portal apps`: search, show, install with parameters, uninstall, export a bundle
zip and upload it as a project's own app; bad parameters are a 400 naming them, other tenants' apps not found."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import pytest
from portal_client import BadRequest, Forbidden, NotFound

from apps.appstore.models import Installation
from apps.jobs.models import Pipeline
from tests.appstore.factories import builtin_version, tiny_bundle
from tests.client.expect import fails
from tests.client.test_cli import logged_in  # noqa: F401 - fixture
from tests.factories import make_token

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_search_show_install_and_uninstall_from_the_command_line(logged_in, cli):  # noqa: F811
    builtin_version()
    found = cli("apps", "list", "-q", "classifier", "--json")
    assert found.exit_code == 0, found.output
    assert [a["name"] for a in json.loads(found.stdout)] == ["tabular-classification", "tune-tabular"]
    shown = cli("apps", "get", "tabular-classification")
    assert shown.exit_code == 0, shown.output
    assert "version 1.0.0 creates:" in shown.stdout
    assert "pipelines: Pipeline “tabular-classification” (5 steps)" in shown.stdout

    made = cli("apps", "install", "tabular-classification", "-p", "project-a", "--name", "flowers",
               "--param", "model=random_forest", "-o", "json")  # fmt: skip
    assert made.exit_code == 0, made.output
    body = json.loads(made.stdout)
    assert (body["app_name"], body["name"], body["parameters"]["model"]) == (
        "tabular-classification", "flowers", "random_forest",
    )  # fmt: skip
    assert Pipeline.objects.filter(project__slug="project-a", name="flowers").exists()
    listed = cli("apps", "installations", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "APP_NAME", "APP_VERSION_NUMBER"]
    assert "flowers" in listed.stdout

    gone = cli("apps", "uninstall", "project-a/flowers")
    assert gone.exit_code == 0, gone.output
    assert not Installation.objects.exists()
    assert not Pipeline.objects.filter(name="flowers").exists()


def test_bad_parameters_and_unknown_apps_exit_with_clear_errors(logged_in, cli, tmp_path):  # noqa: F811
    builtin_version()
    bad = cli("apps", "install", "tabular-classification", "-p", "project-a", "--param", "min_accuracy=high")
    assert bad.exit_code == 2
    assert bad.stderr.startswith("Error (400): ")
    assert "parameters.min_accuracy" in bad.stderr
    assert "Traceback" not in bad.output
    assert not Installation.objects.exists()
    assert cli("apps", "install", "nope", "-p", "project-a").exit_code == 2  # "No app “nope” in the catalogue."
    assert cli("apps", "get", "nope").exit_code == 6
    assert cli("apps", "uninstall", "project-a/none").exit_code == 6
    assert cli("apps", "install", "tabular-classification", "--param", "oops").exit_code == 2  # bad usage
    fails(cli("apps", "install", "tabular-classification", "-p", "project-a", "--param", "a=[1"), 2, "not YAML")
    fails(cli("apps", "list", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")
    fails(cli("apps", "installations", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")


def test_export_and_upload_a_bundle_from_the_command_line(logged_in, cli, tmp_path):  # noqa: F811
    zipped = tmp_path / "tiny.zip"
    zipped.write_bytes(tiny_bundle().to_zip())
    bob = {"PORTAL_TOKEN": make_token(logged_in.world.bob)}  # an editor of project-a, not an admin
    fails(cli("apps", "upload", str(zipped), "-p", "project-a", env=bob), 5, "Error (403): ")
    fails(cli("apps", "upload", str(zipped)), 2, "--project")
    uploaded = cli("apps", "upload", str(zipped), "-p", "project-a", "-o", "json")
    assert uploaded.exit_code == 0, uploaded.output
    assert json.loads(uploaded.stdout)["digest"] == hashlib.sha256(zipped.read_bytes()).hexdigest()

    (tmp_path / "out").mkdir()
    exported = cli("apps", "export", "tiny", str(tmp_path / "out"))
    assert exported.exit_code == 0, exported.output
    saved = tmp_path / "out" / "tiny-1.0.0.zip"
    assert exported.stdout.strip() == f"Saved {saved}."
    assert saved.read_bytes() == zipped.read_bytes()
    fails(cli("apps", "export", "tiny", str(tmp_path), "--version", "9.9.9"), 6)
    fails(cli("apps", "export", "nope"), 6, "No app “nope”")


def test_a_bundle_exported_and_uploaded_round_trips_through_the_sdk(portal, tmp_path):
    with portal.client(portal.world.charlie) as charlie:
        zipped = tmp_path / "tiny.zip"
        zipped.write_bytes(tiny_bundle().to_zip())
        version = charlie.apps.upload("project-b", zipped)
        assert (version.version, version.digest) == ("1.0.0", hashlib.sha256(zipped.read_bytes()).hexdigest())
        saved = charlie.apps.download("tiny", tmp_path)
        assert saved.name == "tiny-1.0.0.zip"
        assert saved.read_bytes() == zipped.read_bytes()
        assert "app.yaml" in zipfile.ZipFile(io.BytesIO(saved.read_bytes())).namelist()
        made = charlie.apps.install("project-b", "tiny", name="hello")
        assert [o["kind"] for o in made.created] == ["datasets", "pipelines"]
        assert [i.name for i in charlie.installations.list("project-b")] == ["hello"]

    with portal.client() as alice:  # alice is not in project-b: its app and installation do not exist for her
        with pytest.raises(NotFound):
            alice.apps.get(version.raw.get("app", "tiny"))
        with pytest.raises(NotFound):
            alice.installations.get(made.id)
        with pytest.raises(BadRequest) as bad:
            alice.apps.upload("project-a", tmp_path / "tiny-1.0.0.zip", visibility="everyone")
        assert "visibility" in bad.value.errors
    with portal.client(portal.world.bob) as bob, pytest.raises(Forbidden):  # an editor, not an admin
        bob.apps.upload("project-a", zipped)
