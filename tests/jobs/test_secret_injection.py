"""Secrets reach the tasks that name them (env references and `secret` arguments), as references in what is stored,
as values in the process only, and as *** in stored logs and dry runs."""

from __future__ import annotations

import hashlib

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.dispatcher import _task_env
from apps.jobs.dryrun import pipeline_workloads
from apps.jobs.logs import LogWriter
from apps.jobs.models import LogLine, PipelineRun, TaskRun
from apps.jobs.services import start_run
from apps.projects import secrets
from apps.runtime.models import LocalWorkload
from apps.runtime.placement import Pool
from tests.factories import ProjectFactory, UserFactory, pipeline, python_template
from tests.jobs.conftest import drive

VALUE = "hf_Sup3rSecretValue-for-tasks"
SECRET_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "x-portal-type": "text"},
        "token": {"type": "string", "x-portal-type": "secret"},
    },
    "required": ["code"],
    "additionalProperties": False,
}


@pytest.fixture
def owner(db):
    return UserFactory(username="alice")


@pytest.fixture
def project(owner):
    project = ProjectFactory(owner=owner, slug="project-a")
    secrets.create_secret(project, owner, name="HF_TOKEN", value=VALUE)
    return project


# --- references are checked when a pipeline is saved ------------------------------------------------------


def test_saving_a_pipeline_that_names_a_missing_secret_names_node_and_key(project, owner):
    python_template(slug="sec", args_schema=SECRET_SCHEMA)
    nodes = [
        {"name": "a", "args": {"code": "pass"}, "env": {"OK": "${secret:HF_TOKEN}", "BAD": "${secret:NOPE}"}},
        {"name": "b", "template": "sec", "args": {"code": "pass", "token": "MISSING"}},
        {"name": "c", "args": {"code": "pass"}, "env": {"HALF": "Bearer ${secret:HF_TOKEN}"}},
    ]
    with pytest.raises(ValidationError) as exc:
        pipeline(project, owner, nodes, env={"TOP": "${secret:GONE}"})
    assert exc.value.message_dict == {
        "env.TOP": ["The project has no secret named “GONE”."],
        "nodes.a.env.BAD": ["The project has no secret named “NOPE”."],
        "nodes.b.args.token": ["The project has no secret named “MISSING”."],
        "nodes.c.env.HALF": ["A secret reference is the whole value: ${secret:NAME}."],
    }


def test_another_projects_secret_is_not_a_valid_reference(project, owner):
    other = ProjectFactory(owner=owner, slug="project-b")
    with pytest.raises(ValidationError) as exc:
        pipeline(other, owner, [{"name": "a", "args": {"code": "pass"}, "env": {"T": "${secret:HF_TOKEN}"}}])
    assert list(exc.value.message_dict) == ["nodes.a.env.T"]


# --- the env a task is given, and what is stored --------------------------------------------------------


def _frozen_task(project, owner, nodes, **spec) -> tuple[TaskRun, dict, object]:
    from apps.jobs.models import JobTemplate
    from apps.jobs.services import _freeze

    saved = pipeline(project, owner, nodes, **spec)
    frozen = _freeze(project, saved.spec)
    run = PipelineRun.objects.create(project=project, pipeline_name="pipe", number=1, created_by=owner, spec=frozen)
    node = frozen["nodes"][0]
    return TaskRun(run=run, node=node["name"], attempt=1), node, JobTemplate.objects.get(pk=node["template_id"])


def test_the_task_env_keeps_references_and_maps_secret_arguments(project, owner, tmp_path):
    python_template(slug="sec", args_schema=SECRET_SCHEMA)
    task, node, template = _frozen_task(
        project,
        owner,
        [
            {
                "name": "a",
                "template": "sec",
                "args": {"code": "pass", "token": "HF_TOKEN"},
                "env": {"MY": "${secret:HF_TOKEN}"},
            }
        ],
    )
    env = _task_env(task, node, template, tmp_path, {}, issue_token=False)
    assert env["MY"] == "${secret:HF_TOKEN}"
    assert env["PORTAL_SECRET_TOKEN"] == "${secret:HF_TOKEN}"
    assert VALUE not in repr(env)


def test_a_secret_deleted_after_the_run_started_fails_the_dispatch_with_the_reason(project, owner, tmp_path):
    task, node, template = _frozen_task(
        project, owner, [{"name": "a", "args": {"code": "pass"}, "env": {"MY": "${secret:HF_TOKEN}"}}]
    )
    project.secrets.all().delete()
    with pytest.raises(LookupError, match="secret HF_TOKEN \\(for MY\\) was deleted after the run started"):
        _task_env(task, node, template, tmp_path, {})


def test_the_dry_run_keeps_references_never_values(project, owner):
    """The manifests show the secretKeyRef a pod will have (tests/jobs/test_pipeline_manifests.py); no value."""
    python_template(slug="sec", args_schema=SECRET_SCHEMA)
    saved = pipeline(
        project,
        owner,
        [
            {
                "name": "a",
                "template": "sec",
                "args": {"code": "pass", "token": "HF_TOKEN"},
                "env": {"MY": "${secret:HF_TOKEN}"},
            }
        ],
    )
    [(_node, workload)] = pipeline_workloads(saved, Pool("kubernetes", "c1", "ns"))
    assert workload.env["MY"] == workload.env["PORTAL_SECRET_TOKEN"] == "${secret:HF_TOKEN}"
    assert VALUE not in repr(workload.as_dict())


# --- masking --------------------------------------------------------------------------------------------


def test_the_log_writer_masks_every_value_and_each_line_of_a_multiline_one(project, owner):
    run = PipelineRun.objects.create(project=project, pipeline_name="p", number=1, created_by=owner)
    task = TaskRun.objects.create(run=run, node="a")
    pem = "-----BEGIN KEY-----\nAAAAbbbbCCCC\n-----END KEY-----"
    with LogWriter(task, [VALUE, "abc", pem]) as writer:
        writer.write_many("0", "stdout", [f"token={VALUE}!", "abc stays (too short)", "nothing here", "AAAAbbbbCCCC"])
        writer.write("0", "stderr", f"{VALUE}{VALUE}".encode())
    texts = list(LogLine.objects.filter(task=task).order_by("seq").values_list("text", flat=True))
    assert texts == ["token=***!", "abc stays (too short)", "nothing here", "***", "******"]


@pytest.mark.live
def test_a_task_that_prints_its_secret_stores_stars(agent, transactional_db):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    secrets.create_secret(project, owner, name="HF_TOKEN", value=VALUE)
    python_template(slug="sec", args_schema=SECRET_SCHEMA)
    code = (
        "import os, sys\n"
        "print('env', os.environ['MY'])\n"
        "print('arg', os.environ['PORTAL_SECRET_TOKEN'], file=sys.stderr)\n"
        "import hashlib\n"
        "print('same', os.environ['MY'] == os.environ['PORTAL_SECRET_TOKEN'] and "
        f"hashlib.sha256(os.environ['MY'].encode()).hexdigest() == {hashlib.sha256(VALUE.encode()).hexdigest()!r})\n"
        "print('unset', 'NOT_MINE' in os.environ)\n"
    )
    node = {
        "name": "a",
        "template": "sec",
        "args": {"code": code, "token": "HF_TOKEN"},
        "env": {"MY": "${secret:HF_TOKEN}"},
    }
    run = drive(start_run(pipeline(project, owner, [node]), owner))
    assert run.status == "succeeded", run.reason
    texts = sorted(LogLine.objects.filter(run=run).values_list("stream", "text"))
    assert texts == [("stderr", "arg ***"), ("stdout", "env ***"), ("stdout", "same True"), ("stdout", "unset False")]
    spec = LocalWorkload.objects.get(uid=f"task-{run.tasks.get().pk}").spec
    assert spec["env"]["MY"] == "${secret:HF_TOKEN}"
    assert VALUE not in str(spec)
