"""A project's navigation in a real browser (issue 26.8): its groups fit one row at 1440 px and at 400 px the page
does not scroll sideways; the open group's pages are one click away and the current one is marked."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def rows(page, selector: str) -> int:
    """How many lines the items of a flex list take (distinct tops)."""
    return page.evaluate(
        "s => new Set([...document.querySelectorAll(s + ' > li')].map(li => Math.round(li.offsetTop))).size", selector
    )


@pytest.mark.parametrize("width", [1440, 400])
def test_the_groups_fit_and_the_open_groups_pages_are_one_click_away(browsing, width):
    owner = UserFactory(username="olga")
    ProjectFactory(owner=owner, slug="lab", name="Lab")
    page = browsing.page
    page.set_viewport_size({"width": width, "height": 900})
    browsing.log_in("olga", PASSWORD)
    browsing.goto("/p/lab/")
    nav = page.locator("[data-project-nav]")

    if width == 1440:
        assert rows(page, "[data-project-nav] .nav-tabs") == 1
    expect(nav.locator(".nav-tabs .active")).to_have_text("Overview")
    expect(nav.locator(".nav-sub")).to_have_count(0)  # a group of one page has no second row

    nav.get_by_role("link", name="Models", exact=True).first.click()  # the group: its first page
    expect(page).to_have_url(browsing.base_url + "/p/lab/experiments/")
    expect(nav.locator(".nav-sub .active")).to_have_text("Experiments")
    nav.locator(".nav-sub").get_by_role("link", name="Services").click()
    expect(page).to_have_url(browsing.base_url + "/p/lab/services/")
    expect(nav.locator('[data-group="models"]')).to_have_class("nav-link active")
    expect(nav.locator('.nav-sub [aria-current="page"]')).to_have_text("Services")
    nav.locator('[data-group="settings"]').click()
    expect(nav.locator(".nav-sub")).to_contain_text("Audit log")  # the owner administers the project
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    browsing.screenshot(f"settings-{width}")
