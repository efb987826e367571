"""The notebook services without a server: validation, quotas, timeouts, folders, and how reports are recorded."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.notebooks import culler, services, workspace
from apps.notebooks.models import Notebook
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import AGENT_SHUT_DOWN, Phase, Status
from tests.factories import UserFactory
from tests.notebooks.factories import heartbeat_agent, notebook


def errors_of(exc: pytest.ExceptionInfo) -> dict[str, list[str]]:
    return exc.value.message_dict


@pytest.fixture(autouse=True)
def _work_dir(tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"


def test_it_creates_a_stopped_notebook_with_parsed_resources(world):
    nb = services.create_notebook(world.project_a, world.bob, name="eda", cpu="1.5", memory="4Gi", gpu="0")

    assert nb.status == Notebook.Status.STOPPED
    assert (nb.owner, nb.ide, float(nb.cpu), nb.memory_bytes) == (world.bob, "jupyterlab", 1.5, 4 * 2**30)


def test_cpu_takes_a_kubernetes_quantity_as_pipeline_nodes_do(world):
    nb = services.create_notebook(world.project_a, world.bob, name="eda", cpu="500m", memory="1Gi")
    assert float(nb.cpu) == 0.5

    services.update_notebook(nb, cpu="1500m")
    nb.refresh_from_db()
    assert float(nb.cpu) == 1.5

    with pytest.raises(ValidationError) as exc:
        services.create_notebook(world.project_a, world.bob, name="tiny", cpu="50m")
    assert errors_of(exc)["cpu"] == ["Give a number from 0.1 to 1000."]  # the same bounds, in cores


def test_it_rejects_bad_input_field_by_field(world):
    with pytest.raises(ValidationError) as exc:
        services.create_notebook(
            world.project_a, world.bob, name="Bad Name", cpu="lots", memory="huge", gpu="0.5", idle_timeout=0,
            image="not an image",
        )  # fmt: skip
    assert set(errors_of(exc)) == {"name", "cpu", "memory", "gpu", "idle_timeout", "image"}


def test_names_are_unique_per_owner_in_a_project(world):
    services.create_notebook(world.project_a, world.bob, name="eda")
    services.create_notebook(world.project_a, world.alice, name="eda")  # another owner: fine

    with pytest.raises(ValidationError) as exc:
        services.create_notebook(world.project_a, world.bob, name="eda")
    assert "already have a notebook" in errors_of(exc)["name"][0]


def test_resources_beyond_the_quota_are_refused(world):
    quota = world.project_a.quota
    quota.cpu_cores, quota.gpus, quota.memory_bytes = 2, 0, 2**30
    quota.save()

    with pytest.raises(ValidationError) as exc:
        services.create_notebook(world.project_a, world.bob, name="big", cpu=4, memory="2Gi", gpu=1)
    assert set(errors_of(exc)) == {"cpu", "memory", "gpu"}
    assert errors_of(exc)["cpu"] == ["asks for 4 CPU cores; the limit is 2 (the project's quota)"]
    assert errors_of(exc)["memory"] == ["asks for 2 GiB of memory; the limit is 1 GiB (the project's quota)"]


def test_vs_code_is_refused_unless_code_server_is_configured(world, settings, tmp_path):
    settings.PORTAL_CODE_SERVER = ""
    with pytest.raises(ValidationError) as exc:
        services.create_notebook(world.project_a, world.bob, name="code", ide="vscode")
    assert errors_of(exc)["ide"] == [
        "code-server is not installed on this portal (an administrator sets PORTAL_CODE_SERVER)."
    ]
    binary = tmp_path / "code-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    settings.PORTAL_CODE_SERVER = str(binary)
    assert services.create_notebook(world.project_a, world.bob, name="code", ide="vscode").ide == "vscode"


def test_the_idle_timeout_is_the_notebooks_then_the_projects_then_the_portals(world, settings):
    settings.PORTAL_NOTEBOOK_IDLE_TIMEOUT, settings.PORTAL_NOTEBOOK_GPU_IDLE_TIMEOUT = 60, 30
    cpu_nb = notebook(world.project_a, world.bob)
    gpu_nb = notebook(world.project_a, world.bob, name="gpu", gpu=1)
    assert (culler.effective_timeout(cpu_nb), culler.effective_timeout(gpu_nb)) == (60, 30)

    world.project_a.notebook_idle_timeout = 120
    world.project_a.save()
    cpu_nb.refresh_from_db()
    assert culler.effective_timeout(cpu_nb) == 120

    cpu_nb.idle_timeout = 5
    assert culler.effective_timeout(cpu_nb) == 5


def test_the_owners_folder_links_the_shared_one_and_odd_usernames_stay_inside(world, settings):
    home = workspace.prepare(world.project_a, world.bob)

    assert home == settings.PORTAL_WORK_DIR / "projects" / "project-a" / "home" / "bob"
    assert os.readlink(home / "shared") == "../../shared"
    assert (home / "shared").resolve() == workspace.shared_dir(world.project_a).resolve()
    odd = UserFactory(username="..")
    assert workspace.home_dir(world.project_a, odd).name == f"user-{odd.pk}"


def test_starting_needs_an_agent_and_says_so(world):
    nb = notebook(world.project_a, world.bob)

    with pytest.raises(ValidationError, match="no agent is running"):
        services.start_notebook(nb)
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.STOPPED
    assert nb.api_token is None


def test_start_is_idempotent_and_stop_of_an_unclaimed_server_records_it(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    again = services.start_notebook(nb)

    assert again.handle == nb.handle == f"notebook-{nb.pk}-1"
    assert LocalWorkload.objects.filter(uid__startswith=f"notebook-{nb.pk}-").count() == 1
    spec = LocalWorkload.objects.get(uid=nb.handle).spec
    assert spec["kind"] == "notebook"
    assert spec["labels"]["notebook"] == str(nb.pk)
    assert f"--ServerApp.base_url=/notebook/{nb.pk}/" in spec["command"]
    assert "--LabApp.news_url=None" in spec["command"]
    assert nb.token not in " ".join(spec["command"])

    stopped = services.stop_notebook(nb)
    assert stopped.status == Notebook.Status.STOPPED  # nobody had claimed it: cancelled at once
    assert stopped.api_token.revoked_at is not None


def test_starting_counts_the_projects_running_notebooks_against_its_quota(world):
    heartbeat_agent()
    quota = world.project_a.quota
    quota.cpu_cores = 1
    quota.save()
    services.start_notebook(notebook(world.project_a, world.alice, cpu="0.75"))

    with pytest.raises(ValidationError, match=r"this notebook needs 0\.5 CPU cores — quota 0\.75/1 in use"):
        services.start_notebook(notebook(world.project_a, world.bob, cpu="0.5"))


def test_a_late_report_of_a_previous_server_changes_nothing(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    services.record_end(nb.pk, "notebook-0-0", Phase.FAILED, Status(Phase.FAILED, exit_code=1, reason="exited"))

    nb.refresh_from_db()
    assert nb.status == Notebook.Status.STARTING


def test_a_failure_keeps_the_log_and_names_the_last_error(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    log = "[I 10:00 ServerApp] starting\nTraceback (most recent call last):\n  File x\nOSError: [Errno 98] in use\n"
    Notebook.objects.filter(pk=nb.pk).update(log_tail=log)

    services.record_end(nb.pk, nb.handle, Phase.FAILED, Status(Phase.FAILED, exit_code=1, reason="exited with code 1"))
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.FAILED
    assert nb.reason == "exited with code 1: OSError: [Errno 98] in use"
    assert nb.log_tail == log
    assert nb.api_token.revoked_at is not None


def test_a_server_shut_down_from_inside_is_stopped_not_failed(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    services.record_end(nb.pk, nb.handle, Phase.SUCCEEDED, Status(Phase.SUCCEEDED, exit_code=0))

    nb.refresh_from_db()
    assert nb.status == Notebook.Status.STOPPED
    assert "shut down from inside" in nb.reason


def test_the_repair_pass_fails_servers_that_never_answer_and_restarts_lost_ones(world, settings):
    settings.PORTAL_NOTEBOOK_START_TIMEOUT = 60
    heartbeat_agent()
    silent = services.start_notebook(notebook(world.project_a, world.bob, name="silent"))
    LocalWorkload.objects.filter(uid=silent.handle).update(state="running")  # a process that never answers
    unclaimed = services.start_notebook(notebook(world.project_a, world.bob, name="unclaimed"))
    lost = services.start_notebook(notebook(world.project_a, world.bob, name="lost"))
    LocalWorkload.objects.filter(uid=lost.handle).update(state="lost", reason="agent lost")

    assert culler.reconcile_notebooks(now=timezone.now()) == 1
    restarted = Notebook.objects.get(pk=lost.pk)
    assert restarted.status == Notebook.Status.STARTING
    assert restarted.handle != lost.handle
    assert restarted.session == lost.session + 1
    assert restarted.reason == "Restarted: its server was lost with its agent (agent lost)"
    assert LocalWorkload.objects.get(uid=restarted.handle).state == "pending"
    lost.api_token.refresh_from_db()
    assert lost.api_token.revoked_at is not None  # the lost server's token; the new server has its own
    assert restarted.api_token_id != lost.api_token_id

    culler.reconcile_notebooks(now=timezone.now() + timedelta(seconds=61))
    silent.refresh_from_db()
    assert silent.status == Notebook.Status.FAILED
    assert silent.reason == "the server did not answer within 60 seconds"
    assert LocalWorkload.objects.get(uid=silent.handle).cancel_requested
    unclaimed.refresh_from_db()
    assert unclaimed.status == Notebook.Status.FAILED
    assert unclaimed.reason.startswith("no agent started the server within 60 seconds (is an agent running?")
    assert LocalWorkload.objects.get(uid=unclaimed.handle).state == "cancelled"


def test_a_server_stopped_by_its_agent_shutting_down_is_restarted(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob))
    shut_down = Status(Phase.CANCELLED, reason=AGENT_SHUT_DOWN)  # what the agent records when SIGTERM stops it
    services.record_end(nb.pk, nb.handle, Phase.CANCELLED, shut_down)

    restarted = Notebook.objects.get(pk=nb.pk)
    assert (restarted.status, restarted.session) == (Notebook.Status.STARTING, nb.session + 1)
    assert "lost with its agent (the agent shut down)" in restarted.reason

    other = services.start_notebook(notebook(world.project_a, world.bob, name="other"))
    services.record_end(other.pk, other.handle, Phase.CANCELLED, Status(Phase.CANCELLED, reason="cancelled"))
    other.refresh_from_db()
    assert other.status == Notebook.Status.STOPPED  # cancelled by someone, not by its agent's shutdown


def test_a_lost_server_that_cannot_start_again_says_why(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob, cpu=2))
    quota = world.project_a.quota
    quota.cpu_cores = 1  # lowered while it ran
    quota.save()

    services.record_end(nb.pk, nb.handle, Phase.LOST, Status(Phase.LOST, reason="agent lost"))

    nb.refresh_from_db()
    assert nb.status == Notebook.Status.FAILED
    assert nb.reason.startswith("its server was lost with its agent (agent lost); not restarted: ")
    assert "quota" in nb.reason


def test_a_running_server_that_does_not_answer_is_not_culled(world):
    heartbeat_agent()
    nb = services.start_notebook(notebook(world.project_a, world.bob, idle_timeout=1))
    LocalWorkload.objects.filter(uid=nb.handle).update(state="running")
    Notebook.objects.filter(pk=nb.pk).update(
        status="running", last_activity=timezone.now(), upstream="http://127.0.0.1:9"
    )

    assert culler.cull_idle_notebooks(now=timezone.now() + timedelta(hours=2)) == {"warned": 0, "stopped": 0}
    nb.refresh_from_db()
    assert nb.status == Notebook.Status.RUNNING
