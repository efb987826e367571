"""A service's traffic charts in a real browser (issue 26.10): one minute of traffic — the usual case right after a
deploy — shows as points on the latency chart (a lone minute between minutes without requests used to draw a line
of zero length: an empty chart), and the legend sits below the plot, clear of the title."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from apps.serving.models import RevisionTraffic
from apps.serving.services import create_service, deploy
from apps.serving.stats import BOUNDS_MS
from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.serving.factories import artifact_store, heartbeat_agent, iris_bytes, make_ready, register  # noqa: F401

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.live,
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.usefixtures("artifact_store"),
]


def test_one_minute_of_traffic_shows_on_the_latency_chart(browsing):
    owner = UserFactory(username="sam")
    lab = ProjectFactory(owner=owner, slug="lab", name="Lab")
    version = register(lab, owner, iris_bytes())
    heartbeat_agent()
    service = create_service(lab, owner, name="iris", registered_model=version.registered_model, model_version=1)
    revision = make_ready(deploy(service, owner))
    buckets = [0] * (len(BOUNDS_MS) + 1)
    buckets[BOUNDS_MS.index(5)] = 90  # 90 requests of 3–5 ms, 10 of 50–75 ms
    buckets[BOUNDS_MS.index(75)] = 10
    minute = datetime.fromtimestamp((datetime.now(UTC).timestamp() // 60 - 1) * 60, UTC)
    RevisionTraffic.objects.create(
        revision=revision, minute=minute, source="web", requests=100, latency_buckets=buckets
    )

    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1000})
    browsing.log_in("sam", PASSWORD)
    browsing.goto(f"/p/lab/services/{service.pk}/")
    chart = page.locator('.serving-chart[data-kind="latency"]')
    expect(chart.locator("canvas")).to_be_attached()
    option = page.evaluate(
        """() => {
            const el = document.querySelector('.serving-chart[data-kind="latency"]');
            const o = echarts.getInstanceByDom(el).getOption();
            const series = o.series.map(s => ({
                name: s.name, symbol: s.showSymbol, points: s.data.filter(p => p[1] !== null),
            }));
            return {series: series, legendBottom: o.legend[0].bottom};
        }"""
    )
    assert [s["name"] for s in option["series"]] == ["r1 p50", "r1 p99"]
    p50, p99 = (s["points"] for s in option["series"])
    assert len(p50) == 1  # the one minute with requests: a point, drawn as a symbol
    assert 3 <= p50[0][1] <= 5
    assert 50 <= p99[0][1] <= 75
    assert all(s["symbol"] for s in option["series"])
    assert option["legendBottom"] == 0  # below the plot; the title is above it
    page.wait_for_timeout(1500)  # the chart's entry animation, for the screenshot
    chart.screenshot(path=str(browsing.screenshot("page").with_name("service-latency-chart.png")))
    browsing.assert_clean()
