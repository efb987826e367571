"""The `portal` command against a live portal: login, every group's happy path and clear errors, exit codes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apps.jobs.models import PipelineRun
from tests.client.test_sdk import PIPELINE_YAML, tree
from tests.factories import make_token

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

FAILING_YAML = (
    "apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: broken}\n"
    "spec: {nodes: [{name: boom, template: py, args: {code: 'raise SystemExit(3)'}}]}\n"
)


@pytest.fixture
def logged_in(portal, cli, config_home):
    result = cli("login", portal.url, "--token", make_token(portal.world.alice))
    assert result.exit_code == 0, result.output
    return portal


def test_login_stores_the_token_per_server_readable_by_the_user_only(portal, cli, config_home):
    token = make_token(portal.world.alice)
    result = cli("login", portal.url, input=f"{token}\n")
    assert result.exit_code == 0, result.output
    assert "as alice" in result.stdout
    stored = config_home / "credentials.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text()) == {
        "default": portal.url, "servers": {portal.url: {"token": token, "username": "alice"}},
    }  # fmt: skip
    me = cli("whoami", "-o", "json")
    assert json.loads(me.stdout)["username"] == "alice"
    assert cli("logout").exit_code == 0
    assert json.loads(stored.read_text())["servers"] == {}
    missing = cli("projects", "list")
    assert missing.exit_code == 1
    assert "portal login" in missing.stderr


def test_login_with_a_wrong_token_stores_nothing_and_exits_4(portal, cli, config_home):
    result = cli("login", portal.url, "--token", "wrong")
    assert result.exit_code == 4
    assert "Invalid, expired or revoked token" in result.stderr
    assert "Traceback" not in result.output
    assert not (config_home / "credentials.json").exists()


def test_projects_as_table_json_and_yaml(logged_in, cli):
    table = cli("projects", "list")
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split() == ["SLUG", "NAME", "MY_ROLE", "RUNTIME"]
    assert "project-a" in table.stdout
    assert [p["slug"] for p in json.loads(cli("projects", "list", "--json").stdout)] == ["project-a"]
    assert yaml.safe_load(cli("-o", "yaml", "projects", "get", "project-a").stdout)["name"] == "Project A"
    assert cli("projects", "get", "project-b").exit_code == 6  # charlie's: not found, never forbidden


def test_datasets_push_then_pull_round_trips_bytes(logged_in, cli, tmp_path):
    source = tmp_path / "data"
    (source / "sub").mkdir(parents=True)
    (source / "a.csv").write_text("x\n1\n")
    (source / "sub" / "b.bin").write_bytes(os.urandom(70_000))
    pushed = cli("datasets", "push", str(source), "--dataset", "project-a/iris", "-m", "first")
    assert pushed.exit_code == 0, pushed.output
    assert "new version iris@1 (2 files" in pushed.stdout
    pulled = cli("datasets", "pull", "project-a/iris@1", str(tmp_path / "out"))
    assert pulled.exit_code == 0, pulled.output
    assert tree(tmp_path / "out") == tree(source)
    versions = json.loads(cli("datasets", "versions", "iris", "-p", "project-a", "--json").stdout)
    assert [v["ref"] for v in versions] == ["iris@1"]
    missing = cli("datasets", "pull", "project-a/iris@9", str(tmp_path / "nothing"))
    assert (missing.exit_code, missing.stderr.strip()) == (6, "Error (404): Dataset “iris” has no version 9.")


def test_apply_submit_wait_and_logs(logged_in, cli, tmp_path):
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(PIPELINE_YAML)
    applied = cli("pipelines", "apply", "-f", str(spec), "-p", "project-a", "-o", "json")
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.stdout)["name"] == "hello"

    submitted = cli("runs", "submit", "project-a/hello", "--wait", "--timeout", "120")
    assert submitted.exit_code == 0, submitted.output
    run = PipelineRun.objects.get()
    assert (run.status, run.trigger) == ("succeeded", "api")
    assert f"run {run.pk} succeeded" in submitted.stderr

    logs = cli("runs", "logs", str(run.pk), "--node", "first")
    assert [line.split("] ", 1)[1] for line in logs.stdout.splitlines()] == [
        "first says 0", "first says 1", "first says 2",
    ]  # fmt: skip
    assert "[first#1/0]" in logs.stdout
    found = cli("runs", "logs", str(run.pk), "-s", "DONE", "-o", "json")
    assert [json.loads(line)["text"] for line in found.stdout.splitlines()] == ["second done"]
    runs = json.loads(cli("runs", "list", "-p", "project-a", "--json").stdout)
    assert [r["id"] for r in runs] == [run.pk]
    bad = cli("runs", "logs", str(run.pk), "-s", " ")
    assert (bad.exit_code, "q:" in bad.stderr) == (2, True)

    again = cli("runs", "submit", "project-a/hello", "--ignore-cache", "--wait", "--timeout", "120")
    assert again.exit_code == 0, again.output
    rerun = PipelineRun.objects.exclude(pk=run.pk).get()
    assert set(rerun.tasks.values_list("status", flat=True)) == {"succeeded"}  # nothing taken from the cache


def test_a_failed_run_exits_10_and_follow_streams_until_the_end(logged_in, cli, tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text(FAILING_YAML)
    assert cli("pipelines", "apply", "-f", str(spec), "-p", "project-a").exit_code == 0
    result = cli("runs", "submit", "broken", "-p", "project-a", "-f", "--timeout", "120")
    assert result.exit_code == 10, result.output
    assert "failed" in result.stderr
    assert "Traceback" not in result.stderr
    run = PipelineRun.objects.get()
    followed = cli("runs", "logs", str(run.pk), "-f")  # a finished run: its lines, then the end
    assert followed.exit_code == 0
    assert followed.stdout == cli("runs", "logs", str(run.pk)).stdout


def test_clear_errors_for_not_found_invalid_and_bad_usage(logged_in, cli, tmp_path):
    assert cli("runs", "get", "999999").exit_code == 6
    spec = tmp_path / "bad.yaml"
    spec.write_text("apiVersion: portal/v1\nkind: Pipeline\nmetadata: {name: x}\nspec: {nodes: [{name: a}]}\n")
    invalid = cli("pipelines", "apply", "-f", str(spec), "-p", "project-a")
    assert invalid.exit_code == 2
    assert invalid.stderr.startswith("Error (400): ")
    assert "template" in invalid.stderr
    assert cli("pipelines", "apply", "-f", str(spec)).exit_code == 2  # no project: a usage error
    assert cli("runs", "submit", "project-b/anything").exit_code == 6
    assert cli("models", "alias", "project-a/none", "production", "1").exit_code == 6


def test_models_services_notebooks_and_tokens_commands(logged_in, cli):
    made = cli("models", "create", "clf", "-p", "project-a", "-o", "json")
    assert made.exit_code == 0, made.output
    assert json.loads(cli("models", "list", "--json").stdout)[0]["name"] == "clf"
    assert cli("models", "versions", "project-a/clf").exit_code == 0
    assert cli("services", "list", "-p", "project-a", "--json").stdout.strip() == "[]"
    assert cli("notebooks", "list", "--json").stdout.strip() == "[]"
    token = json.loads(cli("tokens", "create", "ci", "-p", "project-a", "--scope", "read", "--json").stdout)
    assert token["token"]
    assert cli("tokens", "revoke", str(token["id"])).exit_code == 0
    missing = cli("services", "predict", "project-a/nothing", "--json", "-", input="{}")
    assert missing.exit_code == 6


def test_the_installed_portal_command_runs_as_its_own_process(logged_in, config_home, tmp_path):
    """The console script of the installed package (what `pip install ./client` puts on PATH), in a process of its
    own; PORTAL_URL and PORTAL_TOKEN instead of a login, as in CI."""
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(FAILING_YAML)
    env = {**os.environ, "PORTAL_URL": logged_in.url, "PORTAL_TOKEN": make_token(logged_in.world.bob)}
    env["PORTAL_CONFIG_DIR"] = str(tmp_path / "elsewhere")
    portal = str(Path(sys.executable).with_name("portal"))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([portal, *args], env=env, capture_output=True, text=True, timeout=180, check=False)

    assert run("pipelines", "apply", "-f", str(spec), "-p", "project-a").returncode == 0
    failed = run("runs", "submit", "project-a/broken", "--wait")
    assert failed.returncode == 10, failed.stderr
    assert run("runs", "get", "424242").returncode == 6
    completion = run("completion", "bash")
    assert "_PORTAL_COMPLETE" in completion.stdout


def test_the_demo_iris_pipeline_submitted_with_wait_exits_0(logged_in, cli):
    """The issue's first acceptance line: `portal runs submit demo/iris --wait` against the demo's pipeline."""
    from apps.console.demo import populate

    populate(logged_in.world.project_a, logged_in.world.alice)
    result = cli("runs", "submit", "project-a/iris", "--wait", "--timeout", "300")
    submitted = PipelineRun.objects.filter(trigger="api")  # the demo's study starts runs of its own (trigger "study")
    assert result.exit_code == 0, (result.output, list(submitted.get().tasks.values("node", "reason")))
    run = submitted.get()
    assert run.status == "succeeded"
    assert cli("runs", "logs", str(run.pk), "--node", "evaluate").stdout.strip()
