"""Run comparison's bar and scatter views in a real browser (issue 26.10): a bar per run of the chosen number, and
one number against another with a labelled point per run; choosing another value redraws."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.models.test_tracking_pages import seeded_runs

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

OPTION = """sel => {
    const o = echarts.getInstanceByDom(document.querySelector(sel)).getOption();
    return {x: o.xAxis[0].name || o.xAxis[0].data, y: o.yAxis[0].name, data: o.series[0].data};
}"""


def test_bar_and_scatter_views_of_the_compared_runs(browsing):
    owner = UserFactory(username="cleo")
    lab = ProjectFactory(owner=owner, slug="lab", name="Lab")
    runs = seeded_runs(lab, owner)  # rf-1 (acc 0.95, 100 trees), rf-2 (0.80, 10 trees), lr-1 (0.90, no trees)

    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1000})
    browsing.log_in("cleo", PASSWORD)
    browsing.goto("/p/lab/tracking-runs/compare/?" + "&".join(f"run={r.pk}" for r in runs))
    views = page.locator("[data-compare-views][data-ready]")
    expect(views).to_be_attached()

    bar = page.evaluate(OPTION, "[data-compare-bar]")
    assert bar["x"] == ["rf-1", "rf-2", "lr-1"]
    assert bar["y"] == "metrics.accuracy"
    assert [round(p["value"], 2) for p in bar["data"]] == [0.95, 0.8, 0.9]

    scatter = page.evaluate(OPTION, "[data-compare-scatter]")
    assert (scatter["x"], scatter["y"]) == ("params.n_estimators", "metrics.accuracy")
    assert sorted((p["name"], p["value"][0]) for p in scatter["data"]) == [("rf-1", 100), ("rf-2", 10)]  # lr-1: none

    page.select_option("[data-compare-bar-metric]", label="params.n_estimators")
    bar = page.evaluate(OPTION, "[data-compare-bar]")
    assert bar["y"] == "params.n_estimators"
    assert [p["value"] for p in bar["data"]] == [100, 10, None]
    views.screenshot(path=str(browsing.screenshot("page").with_name("compare-views.png")))
    browsing.assert_clean()
