"""A workload's env is completed by one explicit step where it starts (apps/runtime/secretenv.py): the stored
workload keeps references, the processes get the values, whatever the listener's sink does (or whether there is a
listener at all), and the sink is told what to mask."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.projects import secrets
from apps.runtime import hooks, secretenv
from apps.runtime.local.agent import LocalAgent, Supervised, Supervisor
from apps.runtime.models import LocalWorkload
from apps.runtime.secretenv import Secrets
from apps.runtime.workload import Workload
from portal.lib import sealed
from tests.factories import ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

VALUE = "hf_Sup3rSecretValue-for-workloads"


@pytest.fixture
def project():
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    secrets.create_secret(project, owner, name="HF_TOKEN", value=VALUE)
    return project


class SilentListener(hooks.Listener):
    """A listener whose sink touches nothing: it only notes what it was told to mask."""

    def __init__(self) -> None:
        self.told: list[Secrets] = []

    def sink(self, workload: Workload, secrets: Secrets) -> hooks.DiscardSink:
        self.told.append(secrets)
        return hooks.DiscardSink()


@pytest.fixture
def agent(settings):
    settings.PORTAL_LOCAL_SANDBOX = "off"  # plain processes: what is checked is their env, not the sandbox
    agent = LocalAgent(max_workloads=1)
    yield agent
    agent.notifier.stop(timeout=10)
    agent.pool.shutdown(wait=False)
    agent.sock.close()


def run_here(agent: LocalAgent, workload: Workload) -> LocalWorkload:
    row = LocalWorkload.objects.create(uid=workload.uid, spec=workload.as_dict(), agent=agent.agent)
    Supervisor(agent, Supervised(row.pk, Workload.from_dict(row.spec))).run()
    agent.notifier.stop(timeout=10)  # the end is recorded by the notifier thread
    row.refresh_from_db()
    return row


def printing_env(tmp_path: Path, label: str, env: dict[str, str]) -> Workload:
    out = tmp_path / "env.txt"
    return Workload(
        name="w", uid="w", project="project-a", labels={label: "1"}, env=env, workdir=str(tmp_path),
        command=["/bin/sh", "-c", f'printf "%s\\n%s\\n%s\\n" "$MY" "$TOKEN" "${{GONE-unset}}" > {out}'],
    )  # fmt: skip


@pytest.mark.parametrize("listening", [True, False], ids=["silent-listener", "nobody-listens"])
def test_the_processes_get_the_values_without_the_sink_doing_anything(project, agent, tmp_path, listening):
    reference, token = sealed.new()
    listener = SilentListener()
    if listening:
        hooks.register("silent", listener)
    try:
        env = {"MY": secrets.ref("HF_TOKEN"), "TOKEN": reference, "GONE": secrets.ref("DELETED")}
        row = run_here(agent, printing_env(tmp_path, "silent", env))
    finally:
        hooks._listeners.pop("silent", None)

    assert (row.state, row.reason) == ("succeeded", "")
    assert (tmp_path / "env.txt").read_text().splitlines() == [VALUE, token, "unset"]
    assert row.spec["env"] == env  # what is stored keeps the references
    if listening:
        assert [(set(told.values), told.missing) for told in listener.told] == [({VALUE, token}, ("DELETED",))]


def test_resolving_leaves_the_stored_workload_alone_and_needs_no_query_without_references(
    project, django_assert_num_queries
):
    stored = Workload(name="w", uid="w", project="project-a", command=["true"], env={"MY": secrets.ref("HF_TOKEN")})
    resolved, found = secretenv.resolve(stored)
    assert (resolved.env, stored.env) == ({"MY": VALUE}, {"MY": "${secret:HF_TOKEN}"})
    assert found == Secrets((VALUE,), ())

    plain = Workload(name="p", uid="p", project="project-a", command=["true"], env={"A": "1"})
    with django_assert_num_queries(0):
        assert secretenv.resolve(plain) == (plain, Secrets())
