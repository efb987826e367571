"""The Python SDK (`portal_client.Client`) against a live portal: real HTTP, websockets, worker and agent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from portal_client import BadRequest, Forbidden, NotFound, RunFailed, Unauthorized, UploadError
from portal_client import datasets as sdk_datasets

from apps.datasets.models import UploadSession
from apps.projects.models import Role
from tests.factories import add_member, tracking_run
from tests.serving.factories import artifact_store, register  # noqa: F401 - fixture

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

PIPELINE_YAML = """\
apiVersion: portal/v1
kind: Pipeline
metadata:
  name: hello
  description: two steps that talk
spec:
  nodes:
    - name: first
      template: py
      args:
        code: |
          for i in range(3):
              print(f"first says {i}", flush=True)
    - name: second
      template: py
      depends_on: [first]
      cache: false
      args:
        code: |
          import sys
          print("second on stderr", file=sys.stderr)
          print("second done")
"""


def tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def folder(tmp_path):
    source = tmp_path / "source"
    (source / "images" / "deep").mkdir(parents=True)
    (source / "train.csv").write_text("a,b\n1,2\n3,4\n")
    (source / "images" / "deep" / "blob.bin").write_bytes(os.urandom(300_000))
    (source / "empty.txt").write_bytes(b"")
    return source


def test_a_folder_pushed_and_pulled_comes_back_byte_for_byte(portal, folder, tmp_path):
    client = portal.client()
    version = client.datasets.upload(folder, "iris", "project-a", message="first")
    assert (version.ref, version.file_count, version.created) == ("iris@1", 3, True)
    assert version.total_size == sum(len(b) for b in tree(folder).values())

    pulled = client.datasets.download("project-a/iris@1", tmp_path / "pulled")
    assert pulled.id == version.id
    assert tree(tmp_path / "pulled") == tree(folder)
    assert [f.path for f in client.datasets.files(version.id)] == ["empty.txt", "images/deep/blob.bin", "train.csv"]

    again = client.datasets.upload(folder, "project-a/iris")
    assert (again.created, again.ref) == (False, "iris@1")  # the same files: no new version
    (folder / "train.csv").write_text("a,b\n5,6\n")
    assert client.datasets.upload(folder, "project-a/iris").ref == "iris@2"
    assert [v.number for v in client.datasets.versions("iris", "project-a")] == [1, 2]
    assert client.datasets.version("project-a/iris@latest").number == 2


def test_an_interrupted_upload_resumes_where_the_server_is(portal, folder, tmp_path, monkeypatch):
    monkeypatch.setattr(sdk_datasets, "CHUNK", 64 * 1024)
    client = portal.client()
    sent: list[tuple[str, int]] = []

    def stop_after_two_chunks(path: str, done: int, size: int) -> None:
        sent.append((path, done))
        if len(sent) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        client.datasets.upload(folder, "iris", "project-a", progress=stop_after_two_chunks)
    blob = "images/deep/blob.bin"
    assert sent == [("empty.txt", 0), (blob, 64 * 1024)]
    session = UploadSession.objects.get()
    assert session.status == "open"

    resumed: list[tuple[str, int]] = []
    version = client.datasets.upload(folder, "iris", "project-a", progress=lambda p, d, s: resumed.append((p, d)))
    assert resumed[0] == (blob, 128 * 1024)  # the first 64 KiB were not sent again
    assert UploadSession.objects.get().pk == session.pk
    assert (version.ref, version.created) == ("iris@1", True)
    client.datasets.download("project-a/iris@1", tmp_path / "pulled")
    assert tree(tmp_path / "pulled") == tree(folder)


def test_a_pipeline_applied_from_yaml_runs_and_its_logs_read_back_and_follow(portal):
    client = portal.client()
    pipeline = client.pipelines.apply("project-a", PIPELINE_YAML)
    assert (pipeline.name, pipeline.project) == ("hello", "project-a")
    assert "name: hello" in client.pipelines.export("project-a/hello")

    run = client.runs.submit("project-a/hello")
    followed, status_at_first_line = [], None
    for line in client.logs.follow(run.id):  # until the run ends, every line once
        if not followed:
            status_at_first_line = client.runs.get(run.id).status
        followed.append(line)
    if settings.REDIS_URL:
        # Live: the lines came while it ran. (On the embedded default the agent process publishes into a channel
        # layer of its own state folder, not the test server's: the socket then gets the lines from the store,
        # every 5 s, and a short run may be over first.)
        assert status_at_first_line in ("queued", "running")
    # (a task's stdout and stderr are read apart: their lines keep their order within each stream only)
    assert [line.text for line in followed if line.node == "first"] == ["first says 0", "first says 1", "first says 2"]
    assert sorted(line.text for line in followed if line.node == "second") == ["second done", "second on stderr"]
    assert len({line.id for line in followed}) == 5
    run = client.runs.wait(run.id, timeout=120)
    assert run.status == "succeeded", run.reason
    assert {t.node: t.status for t in client.runs.tasks(run.id)} == {"first": "succeeded", "second": "succeeded"}

    assert [line.text for line in client.logs.history(run.id, node="first", page_size=2)] == [
        "first says 0", "first says 1", "first says 2",
    ]  # fmt: skip
    assert [line.stream for line in client.logs.history(run.id, q="STDERR")] == ["stderr"]
    text = b"".join(client.logs.download(run.id)).decode()
    assert "[second#1/0] second done" in text

    rerun = client.runs.rerun(run.id, "second")
    assert rerun.rerun_of == run.id
    assert client.runs.wait(rerun.id, timeout=120).succeeded
    tasks = {t.node: t.status for t in client.runs.tasks(rerun.id)}
    assert tasks == {"first": "cached", "second": "succeeded"}
    assert sorted(line.text for line in client.logs.history(rerun.id)) == ["second done", "second on stderr"]


def test_a_failing_run_raises_run_failed_and_retries(portal):
    client = portal.client()
    client.pipelines.apply(
        "project-a",
        "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: broken}\n"
        "spec: {nodes: [{name: boom, template: py, args: {code: 'raise SystemExit(3)'}}]}\n",
    )
    run = client.runs.submit("broken", "project-a")
    with pytest.raises(RunFailed) as failed:
        client.runs.wait(run.id, timeout=120, raise_on_failure=True)
    assert failed.value.run.status == "failed"
    retried = client.runs.retry(run.id)
    assert retried.id != run.id
    assert client.runs.wait(retried.id, timeout=120).status == "failed"


def test_errors_carry_the_servers_field_messages(portal):
    client = portal.client()
    with pytest.raises(BadRequest) as bad:
        client.pipelines.create("project-a", "cyclic", {"nodes": [
            {"name": "a", "template": "py", "depends_on": ["b"], "args": {"code": "1"}},
            {"name": "b", "template": "py", "depends_on": ["a"], "args": {"code": "1"}},
        ]})  # fmt: skip
    assert bad.value.status_code == 400
    assert bad.value.field_errors, bad.value.errors
    assert "cycl" in str(bad.value).lower()
    with pytest.raises(BadRequest) as bad:
        client.datasets.create("project-a", "")
    assert "name" in bad.value.field_errors


def test_other_tenants_objects_are_not_found_and_roles_are_forbidden(portal, folder):
    alice = portal.client()
    alice.datasets.upload(folder, "iris", "project-a")
    run = alice.runs.submit(alice.pipelines.apply("project-a", PIPELINE_YAML).id)
    charlie = portal.client(portal.world.charlie)
    with pytest.raises(NotFound):
        charlie.runs.get(run.id)
    with pytest.raises(NotFound):
        list(charlie.logs.history(run.id))
    with pytest.raises(NotFound):
        list(charlie.logs.follow(run.id))
    with pytest.raises(NotFound):
        charlie.datasets.download("project-a/iris@1", "/nonexistent-never-written")
    assert [p.slug for p in charlie.projects.list()] == ["project-b"]

    viewer = portal.world.charlie
    add_member(portal.world.project_a, viewer, Role.VIEWER)
    with pytest.raises(Forbidden):
        portal.client(viewer).runs.cancel(run.id)
    with pytest.raises(Forbidden):
        portal.client(portal.world.alice, scope="read").pipelines.run(run.raw["pipeline"])
    with pytest.raises(Unauthorized):
        type(alice)(portal.url, "not-a-token").runs.get(run.id)
    with pytest.raises(Unauthorized):
        list(type(alice)(portal.url, "not-a-token").logs.follow(run.id))
    alice.runs.wait(run.id, timeout=120)


def test_registry_aliases_notebooks_and_tokens(portal):
    client = portal.client()
    model = client.models.create("project-a", "clf", "a classifier")
    assert client.models.get("project-a/clf").id == model.id
    assert client.models.versions(model.id) == []
    with pytest.raises(NotFound):
        client.models.set_alias("project-a/clf", "production", 1)
    assert [m.name for m in client.models.list("project-a")] == ["clf"]
    with pytest.raises(BadRequest) as no_alias:  # a service needs a version to serve, or an alias that exists
        client.services.create("project-a", "clf-svc", "clf", follow_alias="production")
    assert no_alias.value.field_errors == {"follow_alias": ["clf has no alias “production” (it has: none)."]}
    assert list(client.services.list("project-a")) == []
    with pytest.raises(NotFound):
        client.services.deploy("project-a/clf-svc")
    experiment = client.experiments.create("project-a", "exp")
    assert [e.name for e in client.experiments.list("project-a")] == ["exp"]
    assert list(client.experiments.runs(experiment.id)) == []

    token = client.tokens.create("ci", project="project-a", scope="read", days=1)
    assert token.token
    assert token.project == "project-a"
    assert "ci" in [t.name for t in client.tokens.list()]
    client.tokens.revoke(token.id)
    with pytest.raises(Unauthorized):
        type(client)(portal.url, token.token).projects.get("project-a")


def test_the_package_imports_no_django():
    code = (
        "import sys, portal_client, portal_client.cli; "
        "sys.exit(any(m.split('.')[0] in ('django', 'rest_framework', 'apps', 'portal') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_updates_and_the_rest_of_each_resource(portal, artifact_store):  # noqa: F811
    client = portal.client()
    assert client.projects.update("project-a", description="the A team").description == "the A team"
    with pytest.raises(Forbidden):
        portal.client(portal.world.bob).projects.update("project-a", description="mine now")

    template = client.templates.create("project-a", "hi", "Hi", ["{python}", "-c", "print('hi')"])
    assert (template.ref, template.project) == ("hi@1", "project-a")
    pipeline = client.pipelines.apply("project-a", PIPELINE_YAML)
    assert client.pipelines.update("project-a/hello", description="renamed").description == "renamed"
    with pytest.raises(BadRequest):
        client.pipelines.update(pipeline.id, spec={"nodes": [{"name": "x", "template": "nope"}]})
    assert client.logs.ws_url(7).startswith(portal.url.replace("http", "ws", 1))

    version = register(portal.world.project_a, portal.world.alice, b"a model", "clf")
    client.models.set_alias("project-a/clf", "production", version.version)
    assert [(a.alias, a.version) for a in client.models.aliases("project-a/clf")] == [("production", 1)]
    service = client.services.create("project-a", "svc", "clf", follow_alias="production")
    assert client.services.update(service.id, min_replicas=2, max_replicas=3).raw["max_replicas"] == 3
    with pytest.raises(BadRequest):
        client.services.update(service.id, min_replicas=0)

    run = tracking_run(portal.world.project_a, portal.world.alice, name="trial")
    assert client.experiments.run(run.run_uuid).name == "trial"
    with pytest.raises(NotFound):
        portal.client(portal.world.charlie).experiments.run(run.run_uuid)

    notebook = client.notebooks.create("project-a", "scratch")
    assert client.notebooks.restart(notebook.id).status in ("starting", "running")
    client.notebooks.stop(notebook.id)
    with pytest.raises(NotFound):
        client.labeling.get("project-a/none")


def test_a_pull_that_stopped_mid_file_continues_from_where_it_stopped(portal, folder, tmp_path):
    client = portal.client()
    client.datasets.upload(folder, "iris", "project-a")
    blob = (folder / "images" / "deep" / "blob.bin").read_bytes()
    target = tmp_path / "pulled"
    part = target / "images" / "deep" / "blob.bin.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(blob[:100_000])  # what a pull interrupted after 100 kB left

    seen: list[tuple[str, int]] = []
    client.datasets.download("project-a/iris@1", target, progress=lambda path, done, size: seen.append((path, done)))
    first = next(done for path, done in seen if path == "images/deep/blob.bin")
    assert 100_000 < first <= 100_000 + len(blob)  # counted on from the kept bytes, which were not fetched again
    assert tree(target) == tree(folder)
    assert not part.exists()

    (target / "train.csv").unlink()
    (target / "train.csv.part").write_bytes(b"a,X")  # kept bytes that are wrong: caught by the checksum
    with pytest.raises(UploadError, match="do not match"):
        client.datasets.download("project-a/iris@1", target)
    client.datasets.download("project-a/iris@1", target)  # the bad part was dropped: this pull starts it again
    assert tree(target) == tree(folder)
