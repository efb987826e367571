"""Bundles validate on load with errors naming the field, and round-trip through a zip with a stable digest."""

from __future__ import annotations

import io
import zipfile

import pytest
import yaml
from django.core.exceptions import ValidationError

from apps.appstore import bundle as bundles
from apps.appstore.bundle import BUILTIN_DIR
from apps.appstore.manifest import validate_manifest
from apps.appstore.services import add_version, sync_builtin_apps
from apps.jobs.builtin import load_builtin_templates
from tests.appstore.factories import manifest, tiny_bundle

pytestmark = pytest.mark.django_db


def errors_of(call) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.message_dict


def test_a_node_naming_an_unknown_template_is_refused_at_its_path():
    load_builtin_templates()
    nodes = [{"name": "a", "template": "python"}, {"name": "b", "template": "python"},
             {"name": "c", "template": "no-such-template", "depends_on": ["a", "zz"]}]  # fmt: skip
    errors = errors_of(lambda: validate_manifest(manifest(pipelines=[{"name": "p", "nodes": nodes}])))
    assert "No template “no-such-template”" in errors["spec.pipelines[0].nodes[2].template"][0]
    assert errors["spec.pipelines[0].nodes[2].depends_on"] == ["No node “zz” in this pipeline."]


def test_the_header_metadata_and_sections_are_checked_with_their_paths():
    data = manifest(services=[{"name": "s"}], widgets=[{"name": "w"}], datasets=[{"name": "d", "files": ["x.csv"]}])
    data["apiVersion"] = "v2"
    data["metadata"].update(name="Bad Name", version="one")
    del data["metadata"]["title"]
    errors = errors_of(lambda: validate_manifest(data, files=set()))
    assert set(errors) == {
        "apiVersion", "metadata.name", "metadata.version", "metadata.title", "spec.services[0].model",
        "spec.widgets", "spec.datasets[0].files[0]",
    }  # fmt: skip
    assert errors["spec.widgets"] == ["Unknown kind of object: nothing installs it."]
    assert errors["spec.datasets[0].files[0]"] == ["No file “x.csv” in the bundle."]


def test_a_parameter_schema_that_is_not_valid_is_refused():
    bad = {"type": "object", "properties": {"n": {"type": "integer", "default": "ten"}}}
    errors = errors_of(lambda: validate_manifest(manifest(parameters=bad)))
    assert "the default is invalid" in errors["spec.parameters"][0]


def test_a_zip_round_trips_with_the_same_digest():
    bundle = tiny_bundle()
    data = bundle.to_zip()
    again = bundles.load_zip(data)
    assert (again.manifest, again.readme, again.files) == (bundle.manifest, bundle.readme, bundle.files)
    assert bundles.digest(again.to_zip()) == bundles.digest(data)


def test_a_zip_with_an_escaping_path_or_no_manifest_is_refused():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("app.yaml", yaml.safe_dump(manifest()))
        archive.writestr("../evil.txt", "x")
    assert "Unsafe path" in errors_of(lambda: bundles.load_zip(out.getvalue()))["bundle"][0]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("README.md", "hi")
    assert errors_of(lambda: bundles.load_zip(out.getvalue())) == {"bundle": ["The bundle has no app.yaml."]}
    assert errors_of(lambda: bundles.load_zip(b"not a zip")) == {"bundle": ["Not a zip file."]}


def test_versions_are_immutable():
    first = add_version(tiny_bundle())
    assert add_version(tiny_bundle()) == first  # the same bytes: nothing new
    changed = tiny_bundle()
    changed.readme = "# Tiny\n\nOther words."
    errors = errors_of(lambda: add_version(changed))
    assert "exists with other contents" in errors["metadata.version"][0]
    second = add_version(tiny_bundle(version="1.1.0"))
    assert [v.version for v in first.app.versions.all()] == ["1.1.0", "1.0.0"]
    assert second.digest == bundles.digest(bytes(second.bundle))


def test_every_builtin_bundle_loads_and_syncs_idempotently():
    load_builtin_templates()
    folders = bundles.builtin_folders()
    assert [f.name for f in folders]
    assert all(f.parent == BUILTIN_DIR for f in folders)
    versions = sync_builtin_apps()
    assert {v.app.name for v in versions} >= {"tabular-classification"}
    assert all(v.app.builtin and v.app.project is None for v in versions)
    assert sync_builtin_apps() == versions


def test_a_builtin_bundle_changed_without_a_new_version_stops_the_sync(tmp_path, settings, monkeypatch):
    import shutil

    from django.core.exceptions import ImproperlyConfigured

    load_builtin_templates()
    copy = tmp_path / "apps" / "tabular-classification"
    shutil.copytree(BUILTIN_DIR / "tabular-classification", copy)
    monkeypatch.setattr(bundles, "BUILTIN_DIR", tmp_path / "apps")
    sync_builtin_apps()
    (copy / "README.md").write_text("# Changed\n")
    with pytest.raises(ImproperlyConfigured, match="give a new version number"):
        sync_builtin_apps()
