"""Runs through the orchestrator and a real local agent process: retries, timeouts, cancel, caching,
waiting reasons, data passing and the repair after the agent is killed."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from apps.jobs import orchestrator
from apps.jobs.models import LogLine, TaskRun, TaskStatus
from apps.jobs.services import cancel_run, rerun_from, start_run
from tests.factories import pipeline, python_template
from tests.jobs.conftest import drive, has_started, processes_with

pytestmark = [pytest.mark.live, pytest.mark.smoke]


def statuses(run) -> dict[str, str]:
    return {t.node: t.status for t in run.tasks.order_by("node", "attempt")}


def test_a_dag_runs_in_order_and_passes_outputs_downstream(agent, project, owner):
    pipe = pipeline(
        project,
        owner,
        [
            {"name": "make", "args": {"code": "open('value.txt', 'w').write('41')"}},
            {
                "name": "use",
                "depends_on": ["make"],
                "args": {
                    "code": (
                        "import os; v = int(open(os.path.join(os.environ['PORTAL_INPUT_MAKE'], 'value.txt')).read());"
                        "print('answer', v + 1); print(os.environ['PORTAL_TASK'], os.environ['PORTAL_PROJECT'])"
                    )
                },
            },
        ],
    )
    run = drive(start_run(pipe, owner))
    assert run.status == "succeeded", run.reason
    assert statuses(run) == {"make": "succeeded", "use": "succeeded"}
    use = run.tasks.get(node="use")
    lines = list(LogLine.objects.filter(task=use).order_by("seq").values_list("text", flat=True))
    assert lines == ["answer 42", "use project-a"]
    assert use.started_at >= run.tasks.get(node="make").finished_at
    assert use.usage["wall_seconds"] > 0
    assert use.api_token.revoked_at is not None  # the injected token died with the attempt


def test_a_short_task_reports_the_cpu_it_used(agent, project, owner):
    """Sampling starts once a task has lived a while; a short one's CPU time is read as it exits (its own and that
    of the children it waited for)."""
    burn = (
        "import subprocess, sys, time\n"
        "def spin(seconds):\n    end = time.process_time() + seconds\n    while time.process_time() < end: pass\n"
        "spin(0.3)\n"
        "subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time() + 0.2\\n"
        "while time.process_time() < end: pass'], check=True)\n"
    )
    run = drive(start_run(pipeline(project, owner, [{"name": "burn", "args": {"code": burn}}]), owner))
    assert run.status == "succeeded", run.reason
    usage = run.tasks.get().usage
    assert 0.5 <= usage["cpu_seconds"] <= usage["wall_seconds"] * 2 + 0.5, usage


def test_a_failing_node_is_retried_with_backoff_then_succeeds(agent, project, owner):
    # The first attempt leaves a mark in its own folder; the second finds it there (its project's folders).
    code = (
        "import os, pathlib, sys\np = pathlib.Path(os.environ['PORTAL_OUTPUT_DIR']).parent / 'attempt-1' / 'tried'\n"
        "if not p.exists(): p.touch(); sys.exit(3)\nprint('second time lucky')"
    )
    pipe = pipeline(project, owner, [{"name": "flaky", "retries": 2, "retry_backoff": 1, "args": {"code": code}}])
    run = drive(start_run(pipe, owner))
    first, second = TaskRun.objects.filter(run=run).order_by("attempt")
    assert (first.status, first.exit_code, first.reason) == ("failed", 3, "exited with code 3")
    assert second.status == "succeeded"
    assert second.not_before is not None
    assert (second.not_before - first.finished_at).total_seconds() >= 0.9
    assert second.started_at >= second.not_before
    assert run.status == "succeeded"


def test_a_timeout_kills_the_whole_process_tree(agent, project, owner):
    marker = f"child-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys, time, pathlib;"
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}]);"
        "pathlib.Path('started').write_text(str(c.pid)); time.sleep(60)"
    )
    pipe = pipeline(project, owner, [{"name": "slow", "timeout": 2, "args": {"code": code}}])
    run = drive(start_run(pipe, owner), timeout=40, until=has_started)
    children = [p for p in processes_with(marker) if p.info["cmdline"][-1] == marker]
    assert children  # the child runs
    run = drive(run, timeout=40)
    task = run.tasks.get()
    assert task.status == "failed"
    assert task.reason == "timeout: still running after 2 s"
    assert processes_with(marker) == []


def test_cancel_kills_the_running_process(agent, project, owner):
    marker = f"long-{uuid.uuid4().hex}"
    code = f"import time, pathlib; pathlib.Path('started').write_text({marker!r}); time.sleep(60)"
    pipe = pipeline(
        project,
        owner,
        [{"name": "long", "args": {"code": code}}, {"name": "after", "depends_on": ["long"], "args": {"code": "pass"}}],
    )
    run = drive(start_run(pipe, owner), until=has_started)
    assert processes_with(marker)
    cancel_run(run)
    run = drive(run, timeout=30)
    assert run.status == "cancelled"
    assert statuses(run) == {"after": "cancelled", "long": "cancelled"}
    assert processes_with(marker) == []


def test_an_unchanged_node_is_taken_from_the_cache(agent, project, owner):
    nodes = [
        {"name": "prep", "args": {"code": "open('data.txt','w').write('x' * 10)"}},
        {"name": "train", "depends_on": ["prep"], "args": {"code": "print('training')"}},
    ]
    pipe = pipeline(project, owner, nodes)
    first = drive(start_run(pipe, owner))
    assert statuses(first) == {"prep": "succeeded", "train": "succeeded"}
    second = drive(start_run(pipe, owner))
    assert statuses(second) == {"prep": "cached", "train": "cached"}
    prep = second.tasks.get(node="prep")
    assert prep.cached_from == first.tasks.get(node="prep")
    assert not LogLine.objects.filter(run=second).exists()  # nothing ran

    pipe.spec["nodes"][1]["args"]["code"] = "print('training v2')"
    pipe.save()
    third = drive(start_run(pipe, owner))
    assert statuses(third) == {"prep": "cached", "train": "succeeded"}


def test_ignoring_the_cache_and_rerunning_from_a_node_really_run(agent, project, owner):
    """Issue 26.1: "Run" and "Re-run from here" were silently all cached (same inputs as the run before)."""
    nodes = [
        {"name": "prep", "args": {"code": "open('data.txt','w').write('x' * 10)"}},
        {"name": "train", "depends_on": ["prep"], "args": {"code": "print('training')"}},
    ]
    pipe = pipeline(project, owner, nodes)
    first = drive(start_run(pipe, owner))

    again = drive(start_run(pipe, owner, ignore_cache=True))
    assert statuses(again) == {"prep": "succeeded", "train": "succeeded"}
    assert [node["cache"] for node in again.spec["nodes"]] == [False, False]  # the frozen spec says so

    rerun = drive(rerun_from(first, owner, node="train"))
    assert statuses(rerun) == {"prep": "cached", "train": "succeeded"}  # train ran, though its inputs are the same
    assert LogLine.objects.filter(run=rerun, text="training").exists()
    assert rerun.tasks.get(node="prep").cached_from == first.tasks.get(node="prep")


def test_a_node_of_a_template_with_side_effects_is_never_cached(agent, project, owner):
    python_template(project, slug="announce", side_effects=True)
    pipe = pipeline(project, owner, [{"name": "announce", "template": "announce", "args": {"code": "print('hi')"}}])
    drive(start_run(pipe, owner))

    second = drive(start_run(pipe, owner))

    assert statuses(second) == {"announce": "succeeded"}
    assert second.spec["nodes"][0]["cache"] is False


def test_rerun_from_a_failed_node_reuses_what_succeeded(agent, project, owner, settings):
    flag = Path(settings.PORTAL_WORK_DIR) / project.slug / "fixed"  # in the project's folders, which its tasks see
    nodes = [
        {"name": "a", "cache": False, "args": {"code": "open('out.txt','w').write('a')"}},
        {
            "name": "b",
            "depends_on": ["a"],
            "cache": False,
            "args": {"code": f"import pathlib,sys; sys.exit(0 if pathlib.Path({str(flag)!r}).exists() else 1)"},
        },
    ]
    pipe = pipeline(project, owner, nodes)
    failed = drive(start_run(pipe, owner))
    assert failed.status == "failed"
    assert failed.reason == "b: exited with code 1"
    flag.touch()
    rerun = drive(rerun_from(failed, owner, node="b"))
    assert rerun.status == "succeeded"
    assert statuses(rerun) == {"a": "cached", "b": "succeeded"}


def test_a_node_over_the_quota_waits_and_says_why(agent, project, owner):
    project.quota.cpu_cores = 1
    project.quota.save()
    code = "import time; time.sleep(3)"
    pipe = pipeline(
        project,
        owner,
        [
            {"name": "one", "resources": {"cpu": 1}, "args": {"code": code}},
            {"name": "two", "resources": {"cpu": 1}, "args": {"code": code}},
        ],
    )
    run = drive(start_run(pipe, owner), until=lambda r: r.tasks.filter(status="running").exists())
    waiting = run.tasks.get(status="waiting")
    assert waiting.waiting_reason == "waiting for 1 CPU core — quota 1/1 in use"
    run = drive(run)
    assert statuses(run) == {"one": "succeeded", "two": "succeeded"}


def test_fail_fast_stops_the_other_branches(agent, project, owner):
    nodes = [
        {"name": "bad", "args": {"code": "raise SystemExit(2)"}},
        {"name": "slow", "args": {"code": "import time; time.sleep(30)"}},
        {"name": "after", "depends_on": ["bad"], "args": {"code": "pass"}},
    ]
    run = drive(start_run(pipeline(project, owner, nodes), owner), timeout=40)
    assert run.status == "failed"
    assert statuses(run) == {"after": "cancelled", "bad": "failed", "slow": "cancelled"}


def test_continue_policy_runs_independent_branches_and_marks_upstream_failed(agent, project, owner):
    nodes = [
        {"name": "bad", "args": {"code": "raise SystemExit(2)"}},
        {"name": "good", "args": {"code": "print('fine')"}},
        {"name": "after", "depends_on": ["bad"], "args": {"code": "pass"}},
    ]
    run = drive(start_run(pipeline(project, owner, nodes, failure_policy="continue"), owner))
    assert statuses(run) == {"after": "upstream_failed", "bad": "failed", "good": "succeeded"}
    assert run.status == "failed"


def test_killing_the_agent_leaves_no_task_running(agent, project, owner, settings):
    marker = f"victim-{uuid.uuid4().hex}"
    code = f"import time, pathlib; pathlib.Path('started').write_text({marker!r}); time.sleep(120)"
    run = drive(
        start_run(pipeline(project, owner, [{"name": "victim", "args": {"code": code}}]), owner), until=has_started
    )
    assert processes_with(marker)
    os.kill(agent.proc.pid, signal.SIGKILL)
    agent.proc.wait()
    # Dead for sure now: its last heartbeat need not age the 15 s that keep a busy live agent from being misjudged.
    settings.PORTAL_AGENT_TIMEOUT = 3
    started = time.monotonic()
    while TaskRun.objects.filter(status__in=[TaskStatus.RUNNING, TaskStatus.QUEUED]).exists():
        orchestrator.reconcile()
        assert time.monotonic() - started < 60
        time.sleep(0.5)
    task = run.tasks.get()
    assert task.status == "failed"
    assert task.reason == "agent lost: the process supervising it died"
    run.refresh_from_db()
    assert run.status == "failed"
    deadline = time.monotonic() + 5  # SIGKILLed trees: the kernel takes a moment to reap a PID namespace
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []


def test_without_an_agent_tasks_wait_and_say_so(project, owner):
    run = start_run(pipeline(project, owner, [{"name": "x", "args": {"code": "pass"}}]), owner)
    orchestrator.advance_run(run.pk)
    task = run.tasks.get()
    assert task.status == "waiting"
    assert "no agent is running" in task.waiting_reason


def test_output_dirs_are_per_attempt(agent, project, owner):
    run = drive(
        start_run(
            pipeline(project, owner, [{"name": "x", "args": {"code": "print(__import__('os').getcwd())"}}]), owner
        )
    )
    task = run.tasks.get()
    assert Path(task.output_dir).is_dir()
    assert task.output_dir.endswith("project-a/run-1/x/attempt-1")
    assert LogLine.objects.get(task=task).text == task.output_dir
