"""Each `portal` command group against the live portal: every command's happy path and its clear error (exit code
and message: not found 6, forbidden 5, invalid 2, no or a wrong token 4). tests/client/test_command_coverage.py
fails when a command has neither here nor in the other files of tests/client."""

from __future__ import annotations

import json

import pytest
import yaml

from apps.jobs.models import JobTemplate, Pipeline, PipelineRun
from apps.projects.models import Project, Role
from tests.client.expect import fails
from tests.client.test_cli import FAILING_YAML, logged_in  # noqa: F401 - fixture
from tests.client.test_sdk import PIPELINE_YAML
from tests.factories import UserFactory, add_member, make_token, tracking_run
from tests.serving.factories import artifact_store, register  # noqa: F401 - fixture

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

WRONG_TOKEN = {"PORTAL_TOKEN": "not-a-token"}
SLEEPY_YAML = (
    "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: sleepy}\n"
    "spec: {nodes: [{name: nap, template: py, args: {code: 'import time; time.sleep(120)'}}]}\n"
)


@pytest.fixture
def as_viewer(logged_in):  # noqa: F811
    """The environment of `portal` run by vera, a viewer of project-a."""
    vera = UserFactory(username="vera")
    add_member(logged_in.world.project_a, vera, Role.VIEWER)
    return {"PORTAL_TOKEN": make_token(vera)}


def test_projects_tokens_whoami_logout_and_completion(logged_in, cli, as_viewer):  # noqa: F811
    made = cli("projects", "create", "scratch", "--name", "Scratch", "--description", "a try", "-o", "json")
    assert made.exit_code == 0, made.output
    assert (json.loads(made.stdout)["slug"], json.loads(made.stdout)["my_role"]) == ("scratch", "owner")
    fails(cli("projects", "create", "scratch"), 2, "Error (400): ", "slug")
    fails(cli("projects", "create", "Not A Slug"), 2, "slug")
    fails(cli("projects", "delete", "project-a", "--yes", env=as_viewer), 5, "Error (403): ")
    fails(cli("projects", "delete", "project-b", "--yes"), 6, "Error (404): ")
    gone = cli("projects", "delete", "scratch", "--yes")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted project scratch.")
    assert not Project.objects.filter(slug="scratch").exists()

    listed = cli("tokens", "list")
    assert listed.stdout.splitlines()[0].split() == ["ID", "NAME", "PROJECT", "PREFIX", "SCOPE", "EXPIRES_AT"]
    fails(cli("tokens", "list", env=WRONG_TOKEN), 4, "Error (401): ")
    fails(cli("tokens", "create", "ci", "--scope", "admin"), 2, "--scope")
    fails(cli("tokens", "create", "ci", "-p", "project-b"), 2, "Error (400): ", "project")
    fails(cli("tokens", "revoke", "999999"), 6, "Error (404): ")
    fails(cli("whoami", env=WRONG_TOKEN), 4, "Invalid, expired or revoked token")
    assert json.loads(cli("whoami", "--json").stdout)["username"] == "alice"

    fails(cli("logout", "http://127.0.0.1:9"), 1, "Not logged in to http://127.0.0.1:9.")
    fails(cli("completion", "tcsh"), 2, "tcsh")
    assert "_PORTAL_COMPLETE" in cli("completion", "zsh").stdout


def test_datasets_commands(logged_in, cli, tmp_path, as_viewer):  # noqa: F811
    made = cli("datasets", "create", "photos", "-p", "project-a", "--description", "cats", "-o", "json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["name"] == "photos"
    fails(cli("datasets", "create", "photos", "-p", "project-a"), 2, "Error (400): ")
    fails(cli("datasets", "create", "photos"), 2, "--project")
    listed = cli("datasets", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "VERSION_COUNT", "LATEST_VERSION"]
    assert "photos" in listed.stdout
    fails(cli("datasets", "list", env=WRONG_TOKEN), 4)
    assert json.loads(cli("datasets", "get", "project-a/photos", "--json").stdout)["description"] == "cats"
    fails(cli("datasets", "get", "project-b/photos"), 6)

    source = tmp_path / "cat.txt"
    source.write_text("meow\n")
    fails(cli("datasets", "push", str(source), "--dataset", "project-a/photos", env=as_viewer), 5, "Error (403): ")
    fails(cli("datasets", "push", str(tmp_path / "missing"), "--dataset", "project-a/photos"), 2, "does not exist")
    pushed = cli("datasets", "push", str(source), "--dataset", "photos", "-p", "project-a", "-o", "json")
    assert pushed.exit_code == 0, pushed.output
    assert json.loads(pushed.stdout)["ref"] == "photos@1"
    assert [v["number"] for v in json.loads(cli("datasets", "versions", "project-a/photos", "--json").stdout)] == [1]
    fails(cli("datasets", "versions", "project-a/none"), 6)

    fails(cli("datasets", "delete", "project-a/photos", env=as_viewer), 5)
    gone = cli("datasets", "delete", "project-a/photos")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted dataset project-a/photos.")
    fails(cli("datasets", "delete", "project-a/photos"), 6)


def test_templates_and_pipelines_commands(logged_in, cli, tmp_path, as_viewer):  # noqa: F811
    listed = cli("templates", "list")
    assert listed.stdout.splitlines()[0].split() == ["ID", "REF", "PROJECT", "NAME", "KIND"]
    assert " py" in listed.stdout
    fails(cli("templates", "list", env=WRONG_TOKEN), 4)

    source = tmp_path / "echo.yaml"
    echo = {"slug": "echo", "name": "Echo", "command": ["{python}", "-c", "print('echo')"]}
    source.write_text(yaml.safe_dump(echo))
    applied = cli("templates", "apply", "-f", str(source), "-p", "project-a", "-o", "json")
    assert applied.exit_code == 0, applied.output
    first = json.loads(applied.stdout)
    assert (first["slug"], first["version"], first["project"]) == ("echo", 1, "project-a")
    source.write_text(yaml.safe_dump({**echo, "project": "project-a", "command": ["{python}", "-c", "print(2)"]}))
    again = cli("templates", "apply", "-f", str(source), "-o", "json")
    assert again.exit_code == 0, again.output
    second = json.loads(again.stdout)
    assert (second["slug"], second["version"]) == ("echo", 2)
    source.write_text(yaml.safe_dump({**echo, "framework": "tensorflowish"}))
    invalid = cli("templates", "apply", "-f", str(source), "-p", "project-a")
    fails(invalid, 2, "Error (400): ", "framework: “tensorflowish”")
    source.write_text("- just\n- a list\n")
    fails(cli("templates", "apply", "-f", str(source), "-p", "project-a"), 2, "not a YAML mapping")

    assert json.loads(cli("templates", "get", str(first["id"]), "--json").stdout)["slug"] == "echo"
    fails(cli("templates", "get", "999999"), 6)
    builtin = JobTemplate.objects.get(slug="py", project=None)
    fails(cli("templates", "delete", str(builtin.pk)), 5, "Built-in templates cannot be changed.")
    gone = cli("templates", "delete", str(first["id"]))
    assert (gone.exit_code, gone.stdout.strip()) == (0, f"Deleted template {first['id']}.")

    spec = tmp_path / "pipeline.yaml"
    spec.write_text(PIPELINE_YAML)
    assert cli("pipelines", "apply", "-f", str(spec), "-p", "project-a").exit_code == 0
    listed = cli("pipelines", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "UPDATED_AT"]
    assert "hello" in listed.stdout
    fails(cli("pipelines", "list", env=WRONG_TOKEN), 4)
    shown = json.loads(cli("pipelines", "get", "project-a/hello", "--json").stdout)
    assert [node["name"] for node in shown["spec"]["nodes"]] == ["first", "second"]
    fails(cli("pipelines", "get", "hello", "-p", "project-b"), 6, "No pipeline “hello” in project “project-b”")
    exported = cli("pipelines", "export", "hello", "-p", "project-a")
    assert yaml.safe_load(exported.stdout)["metadata"]["name"] == "hello"
    fails(cli("pipelines", "export", "project-a/none"), 6)
    fails(cli("pipelines", "delete", "project-a/hello", env=as_viewer), 5)
    gone = cli("pipelines", "delete", "project-a/hello")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted pipeline project-a/hello.")
    assert not Pipeline.objects.exists()
    fails(cli("pipelines", "delete", "project-a/hello"), 6)


def test_runs_commands(logged_in, cli, tmp_path, as_viewer):  # noqa: F811
    for text in (SLEEPY_YAML, PIPELINE_YAML, FAILING_YAML):
        spec = tmp_path / "p.yaml"
        spec.write_text(text)
        assert cli("pipelines", "apply", "-f", str(spec), "-p", "project-a").exit_code == 0

    sleepy = json.loads(cli("runs", "submit", "project-a/sleepy", "--json").stdout)
    assert json.loads(cli("runs", "get", str(sleepy["id"]), "--json").stdout)["pipeline_name"] == "sleepy"
    fails(cli("runs", "list", "--status", "sleeping"), 2, "Error (400): ", "status")
    fails(cli("runs", "cancel", str(sleepy["id"]), env=as_viewer), 5, "Error (403): ")
    fails(cli("runs", "cancel", "999999"), 6)
    cancelled = cli("runs", "cancel", str(sleepy["id"]), "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout)["status"] in ("cancelling", "cancelled")
    waited = cli("runs", "wait", str(sleepy["id"]), "--timeout", "120")
    fails(waited, 10, f"run {sleepy['id']}", "cancelled")
    fails(cli("runs", "wait", "999999"), 6)

    hello = json.loads(cli("runs", "submit", "hello", "-p", "project-a", "--json").stdout)
    done = cli("runs", "wait", str(hello["id"]), "--timeout", "120", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["status"] == "succeeded"
    tasks = cli("runs", "tasks", str(hello["id"]))
    assert tasks.stdout.splitlines()[0].split() == ["ID", "NODE", "ATTEMPT", "STATUS", "EXIT_CODE", "REASON"]
    assert {t["node"]: t["status"] for t in json.loads(cli("runs", "tasks", str(hello["id"]), "--json").stdout)} == {
        "first": "succeeded", "second": "succeeded",
    }  # fmt: skip
    fails(cli("runs", "tasks", "999999"), 6)

    fails(cli("runs", "rerun", str(hello["id"]), "--node", "nope"), 2, "Error (400): ", "nope")
    fails(cli("runs", "rerun", str(hello["id"])), 2, "--node")
    rerun = cli("runs", "rerun", str(hello["id"]), "--node", "second", "--json")
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.stdout)["rerun_of"] == hello["id"]
    assert cli("runs", "wait", str(json.loads(rerun.stdout)["id"]), "--timeout", "120").exit_code == 0

    broken = json.loads(cli("runs", "submit", "project-a/broken", "--json").stdout)
    assert cli("runs", "wait", str(broken["id"]), "--timeout", "120").exit_code == 10
    fails(cli("runs", "retry", str(broken["id"]), env={"PORTAL_TOKEN": make_token(logged_in.world.charlie)}), 6)
    retried = cli("runs", "retry", str(broken["id"]), "--json")
    assert retried.exit_code == 0, retried.output
    assert json.loads(retried.stdout)["id"] != broken["id"]
    assert cli("runs", "wait", str(json.loads(retried.stdout)["id"]), "--timeout", "120").exit_code == 10

    fails(cli("runs", "delete", str(broken["id"]), env=as_viewer), 5)
    gone = cli("runs", "delete", str(broken["id"]))
    assert (gone.exit_code, gone.stdout.strip()) == (0, f"Deleted run {broken['id']}.")
    assert not PipelineRun.objects.filter(pk=broken["id"]).exists()
    fails(cli("runs", "delete", str(broken["id"])), 6)


def test_the_log_of_a_run_whose_tasks_were_all_cached_says_why_it_is_empty(logged_in, cli, tmp_path):  # noqa: F811
    spec = tmp_path / "once.yaml"
    spec.write_text(
        "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: once}\n"
        "spec: {nodes: [{name: say, template: py, args: {code: 'print(42)'}}]}\n"
    )
    assert cli("pipelines", "apply", "-f", str(spec), "-p", "project-a").exit_code == 0
    first, second = (json.loads(cli("runs", "submit", "project-a/once", "--wait", "--json").stdout) for _ in "12")
    assert [line.split("] ", 1)[1] for line in cli("runs", "logs", str(first["id"])).stdout.splitlines()] == ["42"]
    for follow in ((), ("-f",)):
        empty = cli("runs", "logs", str(second["id"]), *follow)
        assert (empty.exit_code, empty.stdout) == (0, "")
        assert f"every task of run {second['id']} was cached" in empty.stderr
    fails(cli("runs", "logs", "999999"), 6)


def test_experiments_and_models_commands(logged_in, cli, as_viewer, artifact_store):  # noqa: F811
    made = cli("experiments", "create", "tuning", "-p", "project-a", "--json")
    assert made.exit_code == 0, made.output
    experiment = json.loads(made.stdout)
    fails(cli("experiments", "create", "tuning", "-p", "project-a"), 2, "Error (400): ", "name")
    fails(cli("experiments", "create", "tuning"), 2, "--project")
    listed = cli("experiments", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "LIFECYCLE_STAGE"]
    assert "tuning" in listed.stdout
    fails(cli("experiments", "list", env=WRONG_TOKEN), 4)
    assert json.loads(cli("experiments", "get", str(experiment["id"]), "--json").stdout)["name"] == "tuning"
    fails(cli("experiments", "get", "999999"), 6)
    run = tracking_run(logged_in.world.project_a, logged_in.world.alice, name="trial-1")
    tracked = json.loads(cli("experiments", "runs", str(run.experiment_id), "--json").stdout)
    assert [r["run_uuid"] for r in tracked] == [run.run_uuid]
    fails(cli("experiments", "runs", "999999"), 6)
    fails(cli("experiments", "delete", str(experiment["id"]), env=as_viewer), 5)
    gone = cli("experiments", "delete", str(experiment["id"]))
    assert (gone.exit_code, gone.stdout.strip()) == (0, f"Deleted experiment {experiment['id']}.")
    assert json.loads(cli("experiments", "get", str(experiment["id"]), "--json").stdout)["lifecycle_stage"] == "deleted"
    fails(cli("experiments", "delete", "999999"), 6)

    version = register(logged_in.world.project_a, logged_in.world.alice, b"not really a model", "clf")
    fails(cli("models", "create", "clf", "-p", "project-a"), 2, "Error (400): ")
    fails(cli("models", "list", env=WRONG_TOKEN), 4)
    assert json.loads(cli("models", "get", "clf", "-p", "project-a", "--json").stdout)["name"] == "clf"
    fails(cli("models", "get", "project-b/clf"), 6, "No single registered model “clf”")
    versions = json.loads(cli("models", "versions", "project-a/clf", "--json").stdout)
    assert [v["version"] for v in versions] == [version.version]
    fails(cli("models", "versions", "project-a/none"), 6)
    aliased = cli("models", "alias", "project-a/clf", "production", "1", "--json")
    assert aliased.exit_code == 0, aliased.output
    assert (json.loads(aliased.stdout)["alias"], json.loads(aliased.stdout)["version"]) == ("production", 1)
    fails(cli("models", "alias", "project-a/clf", "production"), 2, "Give the version number")
    fails(cli("models", "alias", "project-a/clf", "staging", "1", env=as_viewer), 5)
    removed = cli("models", "alias", "project-a/clf", "production", "--delete")
    assert (removed.exit_code, removed.stdout.strip()) == (0, "Removed alias production.")
    fails(cli("models", "alias", "project-a/clf", "production", "--delete"), 6, "No alias “production”")
    fails(cli("models", "delete", "project-a/clf", env=as_viewer), 5)
    gone = cli("models", "delete", "project-a/clf")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted model project-a/clf.")
    fails(cli("models", "delete", "project-a/clf"), 6)


def test_notebooks_commands(logged_in, cli, as_viewer):  # noqa: F811
    made = cli("notebooks", "create", "scratch", "-p", "project-a", "--ide", "jupyterlab", "--json")
    assert made.exit_code == 0, made.output
    notebook = json.loads(made.stdout)
    assert (notebook["name"], notebook["ide"], notebook["owner"]) == ("scratch", "jupyterlab", "alice")
    fails(cli("notebooks", "create", "other", "-p", "project-a", "--ide", "emacs"), 2, "Error (400): ", "ide")
    fails(cli("notebooks", "create", "other"), 2, "--project")
    listed = cli("notebooks", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "IDE", "STATUS"]
    fails(cli("notebooks", "list", env=WRONG_TOKEN), 4)
    assert json.loads(cli("notebooks", "get", str(notebook["id"]), "--json").stdout)["name"] == "scratch"
    fails(cli("notebooks", "get", "999999"), 6)

    charlie = {"PORTAL_TOKEN": make_token(logged_in.world.charlie)}
    fails(cli("notebooks", "start", str(notebook["id"]), env=charlie), 6)
    started = cli("notebooks", "start", str(notebook["id"]), "--json")
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["status"] in ("starting", "running")
    fails(cli("notebooks", "stop", str(notebook["id"]), env=charlie), 6)
    stopped = cli("notebooks", "stop", str(notebook["id"]), "--json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout)["status"] in ("stopping", "stopped")
    fails(cli("notebooks", "delete", str(notebook["id"]), env=as_viewer), 5)
    gone = cli("notebooks", "delete", str(notebook["id"]))
    assert (gone.exit_code, gone.stdout.strip()) == (0, f"Deleted notebook {notebook['id']}.")
    fails(cli("notebooks", "delete", str(notebook["id"])), 6)
