"""The local autoscaler: replicas follow measured concurrency (or CPU) within min and max, up at once and down only
after the delay; then for real, with the router's concurrency samples and model servers through the agent."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.serving import autoscale
from apps.serving.models import ConcurrencySample, InferenceService, Replica, Revision
from apps.serving.services import create_service, deploy
from tests.factories import ProjectFactory, UserFactory
from tests.serving.factories import (  # noqa: F401 (fixtures)
    artifact_store,
    drive,
    fast_serving,
    heartbeat_agent,
    iris_bytes,
    make_ready,
    ready_replicas,
    register,
    svc_agent,
)

pytestmark = pytest.mark.usefixtures("artifact_store")


def live(revision: Revision) -> int:
    return revision.replicas.filter(status__in=[Replica.Status.STARTING, Replica.Status.READY]).count()


@pytest.fixture
def serving(world, settings) -> Revision:
    settings.PORTAL_SERVING_SCALE_DOWN_DELAY = 60
    heartbeat_agent()
    version = register(world.project_a, world.alice, iris_bytes())
    service = create_service(world.project_a, world.alice, name="iris", registered_model=version.registered_model,
                             model_version=1, min_replicas=1, max_replicas=4, scale_target=2)  # fmt: skip
    return make_ready(deploy(service, world.alice))


def test_it_scales_up_at_once_and_down_after_the_delay(serving):
    now = timezone.now()
    assert autoscale.scale_revision(serving, 5.0, now) == 3  # ceil(5 / 2)
    assert live(serving) == 3
    assert autoscale.scale_revision(serving, 100.0, now) == 4  # clamped to max
    assert live(serving) == 4
    make_ready(serving)

    assert autoscale.scale_revision(serving, 0.5, now) == 4  # below target: the clock starts
    serving.refresh_from_db()
    assert serving.low_since == now
    assert autoscale.scale_revision(serving, 0.5, now + timedelta(seconds=59)) == 4
    assert autoscale.scale_revision(serving, 7.0, now + timedelta(seconds=59)) == 4  # load back: clock reset
    serving.refresh_from_db()
    assert serving.low_since is None
    assert autoscale.scale_revision(serving, 2.5, now + timedelta(seconds=60)) == 4  # wants 2: the clock restarts
    assert autoscale.scale_revision(serving, 2.5, now + timedelta(seconds=121)) == 2
    assert live(serving) == 2
    # Starting ones go first, then the newest ready ones; the oldest keep serving.
    assert sorted(serving.replicas.filter(status=Replica.Status.READY).values_list("index", flat=True)) == [0, 1]
    assert autoscale.scale_revision(serving, 0.0, now + timedelta(seconds=200)) == 2
    assert autoscale.scale_revision(serving, 0.0, now + timedelta(seconds=261)) == 1  # never below min
    assert autoscale.scale_revision(serving, None, now + timedelta(seconds=400)) == 1  # nothing measured: unchanged


def test_scaling_up_stops_where_the_projects_quota_does(serving, world):
    """Each replica asks for one core (the service's default); the quota of 2.5 cores leaves room for one more."""
    world.project_a.quota.cpu_cores = 2.5
    world.project_a.quota.save()

    assert autoscale.scale_revision(serving, 8.0, timezone.now()) == 2  # wants 4
    assert live(serving) == 2
    assert autoscale.scale_revision(serving, 8.0, timezone.now()) == 2  # still no room: unchanged


def test_the_periodic_pass_measures_each_serving_revision(serving):
    service = serving.service
    decided = autoscale.autoscale(measure=lambda revision: 7.9)
    assert decided == {serving.pk: 4}
    service.status = InferenceService.Status.STOPPED
    service.save()
    assert autoscale.autoscale(measure=lambda revision: 1.0) == {}  # a stopped service is left alone


def test_cpu_is_utilisation_of_the_request_as_an_hpa_computes_it(serving):
    service = serving.service
    service.scale_metric, service.scale_target = InferenceService.ScaleMetric.CPU, 50
    service.save()
    replica = serving.replicas.get(status=Replica.Status.READY)
    assert autoscale.measured_cpu(serving) is None  # no sample yet
    Replica.objects.filter(pk=replica.pk).update(cpu_percent=90.0)  # 90 % of one core, requested 1 core
    assert autoscale.measured_cpu(serving) == 90.0
    assert autoscale.autoscale() == {serving.pk: 2}  # ceil(1 × 90 / 50)


def test_concurrency_comes_from_the_routers_samples(serving, settings):
    settings.PORTAL_SERVING_SCALE_WINDOW = 10
    ConcurrencySample.objects.create(revision=serving, source="web-1", at=timezone.now(), busy_seconds=30.0)
    ConcurrencySample.objects.create(revision=serving, source="web-2", at=timezone.now(), busy_seconds=20.0)
    assert autoscale.measured_concurrency(serving) == pytest.approx(5.0)  # 50 request-seconds over 10 s
    assert autoscale.autoscale() == {serving.pk: 3}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("svc_agent")
def test_real_replicas_follow_the_load_up_and_back_down(settings):
    settings.PORTAL_SERVING_SCALE_WINDOW = 10
    alice = UserFactory(username="alice")
    project = ProjectFactory(owner=alice, slug="project-a", name="Project A")
    version = register(project, alice, iris_bytes())
    service = create_service(project, alice, name="iris", registered_model=version.registered_model, model_version=1,
                             cpu="0.25", memory="256Mi", min_replicas=1, max_replicas=3, scale_target=2)  # fmt: skip
    revision = deploy(service, alice)
    service = drive(service, lambda s: s.status == InferenceService.Status.READY)

    # The router measured 5 requests in flight on average: 3 replicas, the new ones ready to serve.
    ConcurrencySample.objects.create(revision=revision, source="web", at=timezone.now(), busy_seconds=50.0)
    assert autoscale.autoscale() == {revision.pk: 3}
    service = drive(service, lambda s: len(ready_replicas(revision)) == 3)
    assert service.status == InferenceService.Status.READY
    upstreams = {r.upstream for r in ready_replicas(revision)}
    assert len(upstreams) == 3

    # Idle: nothing changes before the delay, then back to one replica; the others' processes end.
    ConcurrencySample.objects.all().delete()
    assert autoscale.autoscale() == {revision.pk: 3}
    time.sleep(settings.PORTAL_SERVING_SCALE_DOWN_DELAY + 0.1)
    assert autoscale.autoscale() == {revision.pk: 1}
    service = drive(service, lambda s: revision.replicas.filter(status=Replica.Status.STOPPED).count() == 2)
    assert [r.index for r in ready_replicas(revision)] == [0]
    assert service.status == InferenceService.Status.READY
