"""The job pages: templates (list, detail with the generated argument form), pipelines (list, new from YAML,
detail with the DAG, run) and runs (list, detail, cancel, re-run).

Who may open which page is test_access_matrix.py's job; these tests check what the pages show and do.
"""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
import yaml
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import JobTemplate, Pipeline, PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.services import start_run
from apps.projects.models import Role
from tests.factories import UserFactory, add_member, pipeline, python_template


def url(name: str, project: str = "project-a", **kwargs) -> str:
    return reverse(f"jobs:{name}", kwargs={"project": project, **kwargs})


def page(response) -> str:
    return html.unescape(response.content.decode())


def pipeline_yaml(name: str, nodes: list[dict]) -> str:
    document = {"apiVersion": "portal/v1", "kind": "Pipeline", "metadata": {"name": name}, "spec": {"nodes": nodes}}
    return yaml.safe_dump(document, sort_keys=False)


@pytest.fixture
def alice(world, client) -> Client:
    client.force_login(world.alice)
    return client


@pytest.fixture
def viewer(world) -> Client:
    user = UserFactory(username="vera")
    add_member(world.project_a, user, Role.VIEWER)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def pipe(world) -> Pipeline:
    pipe = pipeline(
        world.project_a,
        world.alice,
        [{"name": "make", "args": {"code": "1"}}, {"name": "use", "depends_on": ["make"], "args": {"code": "2"}}],
    )
    pipe.description = "Two steps"
    pipe.save(update_fields=["description"])
    return pipe


@pytest.fixture
def run(pipe, world) -> PipelineRun:
    return start_run(pipe, world.alice)


def finish(run: PipelineRun, statuses: dict[str, str], run_status: str) -> PipelineRun:
    now = timezone.now()
    for node, status in statuses.items():
        output = f"/outputs/{run.pk}/{node}" if status == TaskStatus.SUCCEEDED else ""
        TaskRun.objects.create(run=run, node=node, status=status, output_dir=output, started_at=now, finished_at=now)
    run.status, run.finished_at = run_status, now
    run.save()
    return run


# --- templates --------------------------------------------------------------------------------


def test_the_template_list_groups_built_ins_by_category(alice):
    load_builtin_templates()

    response = alice.get(url("template-list"))

    assert response.status_code == 200
    categories = response.context["categories"]
    assert {"general", "data", "training", "evaluation"} <= set(categories)
    assert [t.slug for t in categories["data"]] == ["data-split", "dataset-load", "iris-load", "spark-features"]
    assert [t.slug for t in categories["evaluation"]] == ["evaluate", "llm-evaluate"]
    text = page(response)
    assert "Train/test split" in text
    assert "data-split@1" in text
    assert text.index(">data</h2>") < text.index("Train/test split") < text.index(">evaluation</h2>")


def test_the_template_list_shows_the_newest_version_of_a_project_template(alice, world):
    load_builtin_templates()
    python_template(world.project_a, slug="mine", name="Mine v1", category="custom")
    JobTemplate.objects.create(project=world.project_a, slug="mine", version=2, name="Mine v2", category="custom")
    python_template(world.project_b, slug="theirs", name="Theirs", category="custom")

    response = alice.get(url("template-list"))

    assert [t.name for t in response.context["categories"]["custom"]] == ["Mine v2"]
    assert "Theirs" not in page(response)


def test_the_template_search_filters_the_list(alice):
    load_builtin_templates()

    response = alice.get(url("template-list"), {"q": "SPLIT"})

    assert response.status_code == 200
    assert {c: [t.slug for t in ts] for c, ts in response.context["categories"].items()} == {"data": ["data-split"]}
    assert 'value="split"' in page(response)
    assert "Train a scikit-learn classifier" not in page(response)
    assert "No templates match." in page(alice.get(url("template-list"), {"q": "no such thing"}))


def test_the_template_page_has_a_form_generated_from_the_argument_schema(alice):
    template = next(t for t in load_builtin_templates() if t.slug == "sklearn-train")

    response = alice.get(url("template-detail", pk=template.pk))

    assert response.status_code == 200
    text = page(response)
    for name in template.args_schema["properties"]:
        assert f'name="{name}"' in text
    assert '<option value="random_forest">' in text  # an enum is a choice
    assert 'name="max_iter" value="200"' in text  # defaults fill the form
    assert "command-preview" not in text


def test_valid_arguments_preview_the_command(alice):
    template = next(t for t in load_builtin_templates() if t.slug == "data-split")

    response = alice.post(url("template-detail", pk=template.pk), {"test_size": "0.3", "seed": "7"})

    assert response.status_code == 200
    assert response.context["command"] == [*template.command, "--test_size", "0.3", "--seed", "7"]
    assert "{python} -m apps.jobs.builtin_tasks.split --test_size 0.3 --seed 7</pre>" in page(response)


def test_invalid_arguments_are_a_form_error(alice):
    template = next(t for t in load_builtin_templates() if t.slug == "data-split")

    response = alice.post(url("template-detail", pk=template.pk), {"test_size": "1.5", "seed": "x"})

    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors["seed"] == ["Enter a whole number."]
    assert response.context["command"] is None
    assert "command-preview" not in page(response)


def test_a_schema_error_lands_on_its_field(alice):
    template = next(t for t in load_builtin_templates() if t.slug == "data-split")

    response = alice.post(url("template-detail", pk=template.pk), {"test_size": "1.5"})

    assert response.status_code == 400
    assert response.context["form"].errors["test_size"] == ["must be less than 1"]
    assert "must be less than 1" in page(response)


def test_a_numeric_choice_previews_as_the_number(alice, world):
    schema = {
        "type": "object",
        "properties": {
            "workers": {"type": "integer", "enum": [1, 2, 4], "default": 2},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
        },
        "required": ["workers"],
    }
    template = python_template(world.project_a, slug="choices", args_schema=schema, command=["run"])

    shown = alice.get(url("template-detail", pk=template.pk))
    response = alice.post(url("template-detail", pk=template.pk), {"workers": "4", "mode": ""})

    assert '<option value="2" selected>' in page(shown)
    assert response.status_code == 200, response.context["form"].errors
    assert response.context["command"] == ["run", "--workers", "4"]


# --- pipelines --------------------------------------------------------------------------------


def test_the_pipeline_list_shows_each_pipeline_with_its_last_run(alice, pipe, world):
    start_run(pipe, world.alice)
    last = start_run(pipe, world.alice)
    pipeline(world.project_a, world.alice, [{"name": "solo", "args": {"code": "1"}}], name="never-run")

    response = alice.get(url("pipeline-list"))

    assert response.status_code == 200
    text = page(response)
    assert "Two steps" in text
    assert f'href="{url("run-detail", pk=last.pk)}">#2</a>' in text
    assert [(p.name, r.number if r else None) for p, r in response.context["rows"]] == [
        ("never-run", None),
        ("pipe", 2),
    ]


def test_the_pipeline_list_does_not_grow_with_pipelines(alice, pipe, world, django_assert_max_num_queries):
    start_run(pipe, world.alice)
    alice.get(url("pipeline-list"))
    with CaptureQueriesContext(connection) as one:
        alice.get(url("pipeline-list"))
    for i in range(10):
        other = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "1"}}], name=f"p{i}")
        start_run(other, world.alice)

    with django_assert_max_num_queries(len(one.captured_queries)):
        response = alice.get(url("pipeline-list"))

    assert len(response.context["rows"]) == 11
    assert all(last is not None for _p, last in response.context["rows"])


def test_the_new_pipeline_page_starts_from_an_example(alice):
    response = alice.get(url("pipeline-create"))

    assert response.status_code == 200
    assert "apiVersion: portal/v1" in page(response)


def test_a_valid_yaml_creates_the_pipeline_and_shows_it(alice, world):
    python_template()
    text = pipeline_yaml("fresh", [{"name": "x", "template": "py", "args": {"code": "print(1)"}}])

    response = alice.post(url("pipeline-create"), {"yaml": text})

    saved = Pipeline.objects.get(project=world.project_a, name="fresh")
    assert response.status_code == 302
    assert response.url == url("pipeline-detail", pk=saved.pk)
    assert saved.spec == {"nodes": [{"name": "x", "template": "py", "args": {"code": "print(1)"}}]}
    assert saved.created_by == world.alice


def test_an_invalid_spec_shows_the_node_and_field_and_saves_nothing(alice):
    python_template()
    text = pipeline_yaml("broken", [{"name": "x", "template": "py", "args": {"code": 5}}])

    response = alice.post(url("pipeline-create"), {"yaml": text})

    assert response.status_code == 400
    assert "nodes.x.args.code: 5 is not a string" in page(response)
    assert 'role="alert"' in page(response)
    assert not Pipeline.objects.exists()


def test_invalid_yaml_shows_where_and_saves_nothing(alice):
    response = alice.post(url("pipeline-create"), {"yaml": "metadata:\n  name: x\n    description: y\n"})

    assert response.status_code == 400
    assert "line 3, column 16: mapping values are not allowed here" in page(response)
    assert not Pipeline.objects.exists()


def test_the_pipeline_page_draws_the_dag(alice, pipe):
    response = alice.get(url("pipeline-detail", pk=pipe.pk))

    assert response.status_code == 200
    text = page(response)
    assert '<svg class="dag' in text
    assert '<g class="dag-node" data-node="make"' in text
    assert '<g class="dag-node" data-node="use"' in text
    assert '<text x="10" y="18" class="node-name">make</text>' in text
    assert text.count("marker-end=") == 1  # one edge: make → use
    assert "Not run yet." in text


def test_saving_the_pipeline_page_validates_and_keeps_the_old_spec_on_error(alice, pipe):
    text = pipeline_yaml("pipe", [{"name": "x", "template": "nope"}])

    response = alice.post(url("pipeline-detail", pk=pipe.pk), {"yaml": text})

    assert response.status_code == 400
    assert "nodes.x.template: Unknown template “nope”." in page(response)
    pipe.refresh_from_db()
    assert [n["name"] for n in pipe.spec["nodes"]] == ["make", "use"]


def test_run_starts_a_run_and_opens_its_page(alice, pipe):
    response = alice.post(url("pipeline-run", pk=pipe.pk))

    run = PipelineRun.objects.get()
    assert response.status_code == 302
    assert response.url == url("run-detail", pk=run.pk)
    assert (run.pipeline, run.number, run.status, run.trigger) == (pipe, 1, "queued", "manual")


def test_run_ignoring_the_cache_from_the_page(alice, pipe):
    assert 'name="ignore_cache" value="1"' in page(alice.get(url("pipeline-detail", pk=pipe.pk)))

    alice.post(url("pipeline-run", pk=pipe.pk), {"ignore_cache": "1"})

    assert [node["cache"] for node in PipelineRun.objects.get().spec["nodes"]] == [False, False]


def test_a_cached_node_links_to_the_run_and_logs_its_outputs_come_from(alice, pipe, world):
    source = finish(start_run(pipe, world.alice), {"make": "succeeded", "use": "succeeded"}, RunStatus.SUCCEEDED)
    run = start_run(pipe, world.alice)
    now = timezone.now()
    TaskRun.objects.create(
        run=run, node="make", status=TaskStatus.CACHED, cached_from=source.tasks.get(node="make"),
        reason="cached", started_at=now, finished_at=now,
    )  # fmt: skip

    text = page(alice.get(url("run-detail", pk=run.pk)))

    make = text.split('id="node-make"', 1)[1].split("</tr>", 1)[0]
    assert f"Outputs of {source} / make, same inputs:" in make
    assert f'href="{url("run-detail", pk=source.pk)}#node-make"' in make
    assert f'href="{url("run-logs", pk=source.pk)}"' in make


def test_run_of_a_pipeline_that_no_longer_validates_explains_why(alice, pipe):
    JobTemplate.objects.filter(slug="py").delete()

    response = alice.post(url("pipeline-run", pk=pipe.pk), follow=True)

    assert response.redirect_chain == [(url("pipeline-detail", pk=pipe.pk), 302)]
    assert "The pipeline cannot run: Unknown template “py”." in page(response)
    assert not PipelineRun.objects.exists()


# --- runs -------------------------------------------------------------------------------------


def test_the_run_list_filters_by_status(alice, pipe, world):
    queued = start_run(pipe, world.alice)
    failed = finish(start_run(pipe, world.alice), {"make": "succeeded", "use": "failed"}, RunStatus.FAILED)

    everything = alice.get(url("run-list"))
    only_failed = alice.get(url("run-list"), {"status": "failed"})

    assert [r.pk for r in everything.context["page"].object_list] == [failed.pk, queued.pk]
    assert [r.pk for r in only_failed.context["page"].object_list] == [failed.pk]
    text = page(only_failed)
    assert "pipe #2" in text
    assert "pipe #1" not in text
    assert "2/2" in text  # progress
    assert '<option value="failed" selected>' in text
    assert "No runs match." in page(alice.get(url("run-list"), {"status": "cancelled"}))


def test_the_run_page_shows_nodes_progress_and_the_log_viewer(alice, run):
    response = alice.get(url("run-detail", pk=run.pk))

    assert response.status_code == 200
    text = page(response)
    assert 'id="node-make" data-node="make"' in text
    assert 'id="node-use" data-node="use"' in text
    assert '<span class="small text-nowrap" id="run-progress-text">0/2 nodes done</span>' in text
    assert 'aria-valuemax="2" aria-valuenow="0"' in text
    assert "progress-bar-striped progress-bar-animated" in text  # active
    assert "data-log-viewer" in text
    assert f'data-ws-path="/ws/runs/{run.pk}/logs/"' in text
    assert f'action="{url("run-cancel", pk=run.pk)}"' in text
    assert "Retry failed nodes" not in text


def test_the_run_page_shows_a_tasks_resource_warnings_and_the_gpu_charts_places(alice, run):
    reason = "GPU utilisation of replica worker-1 stayed under 20% for 5 minutes"
    TaskRun.objects.create(
        run=run,
        node="make",
        status=TaskStatus.RUNNING,
        resource_warnings=[{"kind": "low_gpu", "replica": "worker-1", "reason": reason, "at": "2026-01-01T12:00:00Z"}],
    )

    text = page(alice.get(url("run-detail", pk=run.pk)))

    warnings = text.split("data-usage-warnings>", 1)[1].split("</ul>", 1)[0]
    assert f"<li>make · worker-1: {reason}</li>" in warnings
    assert 'data-usage="gpu"' in text
    assert 'data-usage="gpu_memory"' in text


def test_the_page_of_a_failed_run_offers_retry_and_rerun_from_a_node(alice, run):
    finish(run, {"make": "succeeded", "use": "failed"}, RunStatus.FAILED)

    text = page(alice.get(url("run-detail", pk=run.pk)))

    assert ">2/2 nodes done</span>" in text
    bar = text.split('id="run-progress"', 1)[1].split("</div>", 1)[0]
    assert 'class="progress-bar bg-danger"' in bar  # a failed run's bar is red, not a full blue one
    assert "Retry failed nodes" in text
    assert text.count("Re-run from here") == 2
    assert f'action="{url("run-cancel", pk=run.pk)}"' not in text


def test_a_running_run_counts_its_running_nodes_and_its_durations_tick(alice, run):
    started = timezone.now() - timedelta(seconds=75)
    TaskRun.objects.create(run=run, node="make", status=TaskStatus.RUNNING, started_at=started + timedelta(seconds=5))
    run.status, run.started_at = RunStatus.RUNNING, started
    run.save()

    text = page(alice.get(url("run-detail", pk=run.pk)))

    assert ">0/2 nodes done · 1 running</span>" in text
    elapsed = text.split('id="run-elapsed"', 1)[1].split("</span>", 1)[0]
    assert 'data-elapsed="75.' in elapsed  # portal.js counts up from what the server measured
    assert ">1 min 15 s" in elapsed
    make = text.split('id="node-make"', 1)[1].split("</tr>", 1)[0]
    assert 'data-field="duration" data-elapsed="70.' in make
    use = text.split('id="node-use"', 1)[1].split("</tr>", 1)[0]
    assert "data-elapsed" not in use  # not started


def test_the_run_list_gives_each_run_its_duration(alice, pipe, world):
    done = finish(start_run(pipe, world.alice), {"make": "succeeded", "use": "succeeded"}, RunStatus.SUCCEEDED)
    done.started_at = done.finished_at - timedelta(seconds=12.3)
    done.save()
    active = start_run(pipe, world.alice)
    active.status, active.started_at = RunStatus.RUNNING, timezone.now() - timedelta(seconds=130)
    active.save()

    text = page(alice.get(url("run-list")))

    finished_row = text.split(f'data-run="{done.pk}"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="small">12.3 s</td>' in finished_row  # not "0 minutes"
    active_row = text.split(f'data-run="{active.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-elapsed="130.' in active_row
    assert ">2 min 10 s</td>" in active_row


def test_a_viewer_sees_the_run_without_actions(viewer, run):
    text = page(viewer.get(url("run-detail", pk=run.pk)))

    assert 'id="node-make"' in text
    assert f'action="{url("run-cancel", pk=run.pk)}"' not in text


def test_cancel_redirects_to_the_run_which_is_cancelling(alice, run):
    response = alice.post(url("run-cancel", pk=run.pk))

    assert response.status_code == 302
    assert response.url == url("run-detail", pk=run.pk)
    run.refresh_from_db()
    assert run.status == "cancelling"


def test_rerun_from_a_node_redirects_to_the_new_run(alice, run):
    finish(run, {"make": "succeeded", "use": "failed"}, RunStatus.FAILED)

    response = alice.post(url("run-rerun", pk=run.pk), {"node": "use"})

    new = PipelineRun.objects.get(rerun_of=run)
    assert response.status_code == 302
    assert response.url == url("run-detail", pk=new.pk)
    assert (new.trigger, new.number) == ("rerun", 2)
    assert list(new.tasks.values_list("node", "status")) == [("make", "cached")]
    assert "re-run of" in page(alice.get(response.url))


def test_rerun_of_an_unknown_node_explains_and_starts_nothing(alice, run):
    finish(run, {"make": "succeeded", "use": "failed"}, RunStatus.FAILED)

    response = alice.post(url("run-rerun", pk=run.pk), {"node": "nope"}, follow=True)

    assert response.redirect_chain == [(url("run-detail", pk=run.pk), 302)]
    assert "No node “nope” in this run." in page(response)
    assert PipelineRun.objects.count() == 1


def test_a_viewer_cannot_run_cancel_or_rerun(viewer, pipe, run):
    finished = finish(start_run(pipe, None), {"make": "failed"}, RunStatus.FAILED)

    assert viewer.post(url("pipeline-run", pk=pipe.pk)).status_code == 403
    assert viewer.post(url("run-cancel", pk=run.pk)).status_code == 403
    assert viewer.post(url("run-rerun", pk=finished.pk)).status_code == 403
    assert viewer.post(url("pipeline-detail", pk=pipe.pk), {"yaml": "x: 1"}).status_code == 403

    assert PipelineRun.objects.count() == 2
    run.refresh_from_db()
    assert run.status == "queued"


def test_an_outsider_gets_404(world, client, run):
    client.force_login(world.charlie)

    assert client.get(url("run-detail", pk=run.pk)).status_code == 404
    assert client.get(url("run-detail", project="project-b", pk=run.pk)).status_code == 404
