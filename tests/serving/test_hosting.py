"""How a revision is hosted follows what its runtime declares (`Runtime.on_cluster`), never the runtime's name:
replica processes the portal counts, probes and scales, or one cluster service that stands for all its pods."""

from __future__ import annotations

import pytest

from apps.runtime import base
from apps.runtime.local.runtime import LocalRuntime
from apps.serving import hosting
from apps.serving.models import Revision
from tests.serving.replicas import make_service


class RemoteRuntime(LocalRuntime):
    """A third runtime that runs its workloads on a cluster."""

    name = "remote"
    on_cluster = True


@pytest.fixture
def remote_runtime(monkeypatch):
    monkeypatch.setitem(base.RUNTIMES, "remote", f"{__name__}.RemoteRuntime")
    base.get_runtime.cache_clear()
    yield
    base.get_runtime.cache_clear()


def revision_on(project, runtime: str, desired: int) -> Revision:
    service = make_service(project)
    return Revision.objects.create(
        service=service, number=1, status=Revision.Status.READY, desired_replicas=desired, config={"runtime": runtime}
    )


@pytest.mark.usefixtures("remote_runtime")
@pytest.mark.parametrize(
    ("runtime", "expected", "rows", "probed", "scaled"),
    [("local", hosting.LocalReplicas, 3, True, True), ("kubernetes", hosting.ClusterService, 1, False, False),
     ("remote", hosting.ClusterService, 1, False, False)],
)  # fmt: skip
def test_a_revision_is_hosted_as_its_runtime_declares(world, runtime, expected, rows, probed, scaled):
    revision = revision_on(world.project_a, runtime, desired=3)
    chosen = hosting.hosting_of(revision)
    assert type(chosen) is expected
    assert (chosen.wanted_replicas(revision), chosen.probes_readiness, chosen.autoscaled_here) == (rows, probed, scaled)


def test_a_revision_without_a_runtime_was_deployed_locally(world):
    revision = revision_on(world.project_a, "", desired=2)
    assert hosting.hosting_of(revision) is hosting.LOCAL
