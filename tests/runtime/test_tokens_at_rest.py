"""Tokens handed to workloads are never stored in clear (issue 27): the stored workload holds a sealed reference
(portal/lib/sealed.py), the process gets the value in memory where it starts, and only the token's digest is in
the tokens table. Scanned as the database stores it: every row of every table, encrypted columns as ciphertext."""

from __future__ import annotations

import base64

import pytest
from django.db import connection

from apps.accounts.models import ApiToken, hash_token
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from apps.notebooks.services import start_notebook
from apps.runtime import secretenv
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import Workload
from portal.lib import sealed
from tests.factories import pipeline
from tests.jobs import conftest as jobs_fixtures
from tests.jobs.conftest import drive
from tests.notebooks.factories import heartbeat_agent, notebook
from tests.serving.factories import artifact_store  # noqa: F401 (fixture)

# The local agent in its own process, and alice's project in a database it also sees (tests/jobs/conftest.py).
agent, owner, project = jobs_fixtures.agent, jobs_fixtures.owner, jobs_fixtures.project

TOKEN_VARS = ("PORTAL_API_TOKEN", "MLFLOW_TRACKING_TOKEN")


def stored_text() -> str:
    """Every row of every table, as stored (raw SQL: the ORM would decrypt encrypted columns)."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            rows.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(rows)


def spec_env(uid: str) -> dict[str, str]:
    return LocalWorkload.objects.get(uid=uid).spec["env"]


@pytest.mark.live
def test_a_task_gets_its_token_in_memory_and_the_database_never_holds_it(agent, owner, project):
    code = (
        "import hashlib, os\n"
        "raw = os.environ['PORTAL_API_TOKEN']\n"
        "print('digest', hashlib.sha256(raw.encode()).hexdigest())\n"
        "print('same', raw == os.environ['MLFLOW_TRACKING_TOKEN'])\n"
        "print('token', raw)\n"
    )
    run = drive(start_run(pipeline(project, owner, [{"name": "a", "args": {"code": code}}]), owner))

    assert run.status == "succeeded", run.reason
    task = run.tasks.get()
    env = spec_env(f"task-{task.pk}")
    assert all(sealed.is_reference(env[name]) for name in TOKEN_VARS)
    raw = sealed.value_of(env["PORTAL_API_TOKEN"])
    token = ApiToken.objects.get(pk=task.api_token_id)
    assert hash_token(raw) == token.digest  # the reference stands for the task's token
    lines = list(LogLine.objects.filter(task=task).order_by("seq").values_list("text", flat=True))
    assert lines == [f"digest {token.digest}", "same True", "token ***"]  # the process had it; the log masks it
    assert raw not in stored_text()


def test_a_notebooks_tokens_are_references_in_its_workload_and_values_only_in_memory(world, settings, tmp_path):
    settings.PORTAL_NOTEBOOK_DIR = tmp_path / "notebooks"
    heartbeat_agent()
    nb = start_notebook(notebook(world.project_a, world.alice))

    env = spec_env(nb.handle)
    assert all(sealed.is_reference(env[name]) for name in (*TOKEN_VARS, "JUPYTER_TOKEN"))
    stored_workload = Workload.from_dict(LocalWorkload.objects.get(uid=nb.handle).spec)
    workload, secrets = secretenv.resolve(stored_workload)  # what the agent does before it plans the processes
    assert stored_workload.env == env  # the stored workload keeps its references
    assert set(secrets.values) == {workload.env["PORTAL_API_TOKEN"], workload.env["JUPYTER_TOKEN"]}
    raw = workload.env["PORTAL_API_TOKEN"]
    assert raw == workload.env["MLFLOW_TRACKING_TOKEN"]
    assert hash_token(raw) == nb.api_token.digest
    assert workload.env["JUPYTER_TOKEN"] == nb.token  # what the proxy sends (Notebook.token, encrypted at rest)
    stored = stored_text()
    assert raw not in stored
    assert nb.token not in stored


@pytest.mark.usefixtures("artifact_store")
def test_a_model_servers_workload_holds_no_token_and_its_key_only_as_a_digest(world, settings, tmp_path):
    from apps.serving.services import create_service, deploy, rotate_key
    from tests.serving.factories import iris_bytes, register

    settings.PORTAL_WORK_DIR = tmp_path / "work"
    heartbeat_agent()
    version = register(world.project_a, world.alice, iris_bytes())
    service = create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                             model_version=1, auth="key")  # fmt: skip
    key = rotate_key(service)
    revision = deploy(service, world.alice)

    [replica] = revision.replicas.all()
    env = spec_env(replica.handle)
    assert not set(env) & {*TOKEN_VARS, "JUPYTER_TOKEN"}, env
    assert not any(sealed.is_reference(value) for value in env.values())
    assert key not in stored_text()


def test_a_sealed_value_survives_a_key_rotation_and_not_a_removed_key(settings):
    reference, value = sealed.new()
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-key-" + "x" * 40

    assert sealed.value_of(reference) == value
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(LookupError, match="no longer configured"):
        sealed.value_of(reference)
    env = {"PORTAL_API_TOKEN": reference, "OTHER": "kept"}
    assert sealed.complete_env(env) == []
    assert env == {"OTHER": "kept"}  # the process gets no variable rather than a reference


def test_values_are_distinct_and_never_the_reference():
    pairs = [sealed.new() for _ in range(50)]
    assert len({value for _ref, value in pairs}) == 50
    for reference, value in pairs:
        assert value not in reference
        assert len(base64.urlsafe_b64decode(value + "=")) == 32
