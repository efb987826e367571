"""A dataset version's statistics in a real browser (issue 26.10): each column's distribution is drawn — a histogram
of a numeric column, the most frequent values of the others — and the table still fits a phone's width."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.datasets.tasks import analyze_version
from tests.factories import PASSWORD, ProjectFactory, UserFactory, dataset, dataset_version

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.mark.parametrize("width", [1440, 400])
def test_each_column_shows_its_distribution(browsing, width):
    owner = UserFactory(username="dora")
    lab = ProjectFactory(owner=owner, slug="lab", name="Lab")
    rows = "".join(f"{4 + (i % 37) / 10},{['setosa', 'versicolor', 'virginica'][i % 3]}\n" for i in range(150))
    version = dataset_version(dataset(lab, owner), {"iris.csv": ("sepal_length,species\n" + rows).encode()})
    analyze_version(version.pk)

    page = browsing.page
    page.set_viewport_size({"width": width, "height": 900})
    browsing.log_in("dora", PASSWORD)
    browsing.goto(f"/p/lab/dataset-versions/{version.pk}/")
    stats = page.locator("table.stats")
    expect(stats.locator("svg.distribution rect")).to_have_count(20)
    expect(stats.locator(".distribution-top li")).to_have_count(3)
    expect(stats.locator(".distribution-top li").first).to_have_attribute("title", "setosa: 50")
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # the table scrolls inside its box
    stats.scroll_into_view_if_needed()
    stats.screenshot(path=str(browsing.screenshot("page").with_name(f"dataset-statistics-{width}.png")))
    browsing.assert_clean()
