"""A study's parallel coordinates in a real browser (issue 26.10): long parameter names wrap onto lines of ~14
characters (after "_", "." or "-") instead of running off the chart's edges."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.hpo import driver
from apps.hpo.models import Trial
from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.hpo.factories import study

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_parallel_coordinates_keep_long_axis_names_inside_the_chart(browsing):
    owner = UserFactory(username="tina")
    lab = ProjectFactory(owner=owner, slug="lab", name="Lab")
    made = study(
        lab,
        owner,
        space={
            "learning_rate_of_the_optimiser": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
            "solver": {"type": "categorical", "choices": ["lbfgs", "saga"]},
        },
        trial_template={"job_template": "py", "args": {"code": "print(${trial.learning_rate_of_the_optimiser})"}},
    )
    driver.advance_study(made.pk)
    for value, trial in zip([0.81, 0.93], made.trials.order_by("number"), strict=True):
        trial.status, trial.values = Trial.Status.COMPLETE, [value]
        trial.save(update_fields=["status", "values"])

    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1000})
    browsing.log_in("tina", PASSWORD)
    browsing.goto(f"/p/lab/studies/{made.pk}/")
    chart = page.locator('[data-hpo-chart="parallel"]')
    expect(chart.locator("canvas")).to_be_attached()
    axes = page.evaluate(
        """() => echarts.getInstanceByDom(document.querySelector('[data-hpo-chart="parallel"]'))
            .getOption().parallelAxis.map(a => a.name)"""
    )
    assert sorted(axes) == ["learning_rate_\nof_the_\noptimiser", "solver", "val_accuracy"]
    page.wait_for_timeout(1000)  # the entry animation, for the screenshot
    chart.screenshot(path=str(browsing.screenshot("page").with_name("study-parallel.png")))
    browsing.assert_clean()
