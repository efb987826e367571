"""`portal services` against the live portal: a registered iris model is deployed for real (the agent starts the
model-server process, the worker probes it ready), answers a prediction through the portal's router, takes a canary
that is promoted, rolls back, stops and starts; every command's clear error (not found, forbidden, invalid)."""

from __future__ import annotations

import json
import time

import pytest

from apps.projects.models import Role
from apps.serving.models import InferenceService
from tests.client.expect import fails
from tests.client.test_cli import logged_in  # noqa: F401 - fixture
from tests.factories import UserFactory, add_member, make_token
from tests.serving.factories import (  # noqa: F401 - fixtures
    IRIS_CLASSES,
    READY_SECONDS,
    artifact_store,
    fast_serving,
    infer_body,
    iris_bytes,
    predictions,
    register,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def revisions(cli, service: str) -> list[dict]:
    result = cli("services", "revisions", service, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def wait_revision(cli, service: str, number: int, status: str = "ready") -> dict:
    deadline = time.monotonic() + READY_SECONDS
    while True:
        found = {r["number"]: r for r in revisions(cli, service)}
        if found.get(number, {}).get("status") == status:
            return found[number]
        assert time.monotonic() < deadline, f"revision {number} never {status}: {found}"
        time.sleep(0.5)


def test_deploy_predict_canary_promote_rollback_stop_and_start(logged_in, cli, tmp_path, artifact_store, fast_serving):  # noqa: F811
    world = logged_in.world
    register(world.project_a, world.alice, iris_bytes(max_iter=500))
    register(world.project_a, world.alice, iris_bytes(max_iter=800, c=0.5))
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    as_viewer = {"PORTAL_TOKEN": make_token(viewer)}
    as_charlie = {"PORTAL_TOKEN": make_token(world.charlie)}

    made = cli("services", "create", "iris", "--model", "iris-classifier", "--version", "1", "-p", "project-a", "-o",
               "json")  # fmt: skip
    assert made.exit_code == 0, made.output
    assert (json.loads(made.stdout)["name"], json.loads(made.stdout)["status"]) == ("iris", "pending")
    fails(cli("services", "create", "other", "--model", "nope", "-p", "project-a"), 2, "Error (400): ")
    fails(cli("services", "create", "other", "--model", "iris-classifier"), 2, "--project")

    deployed = cli("services", "deploy", "project-a/iris", "--wait", "--json")
    assert deployed.exit_code == 0, (deployed.output, list(InferenceService.objects.values("status", "reason")))
    assert json.loads(deployed.stdout)["status"] == "ready"
    fails(cli("services", "deploy", "project-a/iris", env=as_viewer), 5, "Error (403): ")
    fails(cli("services", "deploy", "project-a/none"), 6, "Error (404): ")

    shown = json.loads(cli("services", "get", "iris", "-p", "project-a", "-o", "json").stdout)
    assert (shown["status"], shown["model_version"]) == ("ready", 1)
    fails(cli("services", "get", "project-a/iris", env=as_charlie), 6, "No single service “iris”")
    listed = cli("services", "list", "-p", "project-a")
    assert listed.stdout.splitlines()[0].split() == ["ID", "PROJECT", "NAME", "REGISTERED_MODEL", "MODEL_VERSION",
                                                     "STATUS"]  # fmt: skip
    assert "iris" in listed.stdout
    fails(cli("services", "list", env={"PORTAL_TOKEN": "not-a-token"}), 4, "Error (401): ")

    # A prediction through the portal's router (/serving/project-a/iris/…), with the CLI's token.
    request = tmp_path / "request.json"
    request.write_text(json.dumps(infer_body()))
    answer = cli("services", "predict", "project-a/iris", "--json", str(request))
    assert answer.exit_code == 0, answer.output
    assert predictions(json.loads(answer.stdout)) == IRIS_CLASSES
    piped = cli("services", "predict", "project-a/iris", "--json", "-", input=json.dumps(infer_body()))
    assert predictions(json.loads(piped.stdout)) == IRIS_CLASSES
    fails(cli("services", "predict", "project-a/iris", "--json", "-", input="{not json"), 2, "not JSON")
    fails(cli("services", "predict", "project-a/iris", "--json", "-", input='{"inputs": "x"}'), 2, "Error (400): ")

    # A canary of version 2, promoted once ready; then a rollback to revision 1's version.
    fails(cli("services", "promote", "project-a/iris"), 2, "no ready canary")
    fails(cli("services", "canary", "project-a/iris", "--percent", "150"), 2, "--percent")
    fails(cli("services", "canary", "project-a/iris", "--percent", "20", "--version", "7"), 2, "Error (400): ")
    canary = cli("services", "canary", "project-a/iris", "--percent", "20", "--version", "2", "--json")
    assert canary.exit_code == 0, canary.output
    assert (json.loads(canary.stdout)["number"], json.loads(canary.stdout)["role"]) == (2, "canary")
    wait_revision(cli, "project-a/iris", 2)
    promoted = cli("services", "promote", "project-a/iris", "--json")
    assert promoted.exit_code == 0, promoted.output
    body = json.loads(promoted.stdout)
    assert (body["current_revision"], body["canary_revision"]) == (2, None)
    current = {r["number"]: r for r in revisions(cli, "project-a/iris")}[2]
    assert (current["role"], current["model_version"]) == ("current", 2)
    table = cli("services", "revisions", "project-a/iris")
    assert table.stdout.splitlines()[0].split() == ["ID", "NUMBER", "ROLE", "STATUS", "TRAFFIC_PERCENT"]
    fails(cli("services", "revisions", "project-a/none"), 6)

    fails(cli("services", "rollback", "project-a/iris", "9"), 2, "no revision 9")
    rolled = cli("services", "rollback", "project-a/iris", "1", "--json")
    assert rolled.exit_code == 0, rolled.output
    assert json.loads(rolled.stdout)["number"] == 3
    wait_revision(cli, "project-a/iris", 3)
    assert predictions(json.loads(cli("services", "predict", "project-a/iris", "--json", str(request)).stdout)) == (
        IRIS_CLASSES
    )

    fails(cli("services", "stop", "project-a/iris", env=as_charlie), 6)
    stopped = cli("services", "stop", "project-a/iris", "--json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout)["status"] == "stopped"
    fails(cli("services", "start", "project-a/iris", env=as_viewer), 5)
    started = cli("services", "start", "project-a/iris", "--json")
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["status"] != "stopped"

    fails(cli("services", "delete", "project-a/iris", env=as_viewer), 5)
    gone = cli("services", "delete", "project-a/iris")
    assert (gone.exit_code, gone.stdout.strip()) == (0, "Deleted service project-a/iris.")
    assert not InferenceService.objects.exists()
    fails(cli("services", "delete", "project-a/iris"), 6)
