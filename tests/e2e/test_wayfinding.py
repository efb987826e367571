"""Wayfinding in a real browser (issue 26.8): one breadcrumb trail on a project's pages (Projects › project ›
section › page), a project switcher that keeps the section, and the navbar's search box leading to an object."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory, UserFactory, dataset, pipeline

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.fixture
def olga():
    owner = UserFactory(username="olga")
    lab = ProjectFactory(owner=owner, slug="lab", name="Lab")
    ProjectFactory(owner=owner, slug="other-lab", name="Other lab")
    pipe = pipeline(lab, owner, [{"name": "fit", "args": {"code": "1"}}], name="train-iris")
    dataset(lab, owner, name="iris")
    return owner, lab, pipe


def trail(page) -> list[str]:
    return [t.strip() for t in page.locator("[data-breadcrumb] .breadcrumb-item").all_inner_texts()]


def test_the_trail_the_switcher_and_the_search_box_lead_where_they_say(browsing, olga):
    _owner, _lab, pipe = olga
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 900})
    browsing.log_in("olga", PASSWORD)

    browsing.goto(f"/p/lab/pipelines/{pipe.pk}/")
    assert trail(page) == ["Projects", "Lab", "Pipelines", "train-iris"]
    expect(page.locator('[data-breadcrumb] [aria-current="page"]')).to_have_text("train-iris")
    browsing.screenshot("trail-1440")

    browsing.wait_for_scripts()
    page.locator("[data-project-switcher] .dropdown-toggle").click()
    menu = page.locator("[data-project-switcher] .dropdown-menu")
    expect(menu).to_be_visible()
    browsing.screenshot("switcher-1440")
    menu.get_by_role("link", name="Other lab").click()  # the same section, in the other project
    expect(page).to_have_url(browsing.base_url + "/p/other-lab/pipelines/")
    assert trail(page) == ["Projects", "Other lab", "Pipelines"]

    box = page.locator("[data-global-search] input[name=q]")
    box.fill("iris")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"/search/\?q=iris$"))
    results = page.locator("#search-results")
    expect(results.locator('[data-kind="pipelines"]')).to_contain_text("train-iris")
    expect(results.locator('[data-kind="datasets"]')).to_contain_text("iris")
    browsing.screenshot("search-1440")
    results.get_by_role("link", name=re.compile("^train-iris")).click()
    expect(page).to_have_url(browsing.base_url + f"/p/lab/pipelines/{pipe.pk}/")

    page.get_by_role("link", name="Pipelines", exact=True).first.click()  # the trail's section, back to the list
    expect(page).to_have_url(browsing.base_url + "/p/lab/pipelines/")
    browsing.assert_clean()


@pytest.mark.parametrize("path", ["/p/lab/pipelines/{pk}/", "/search/?q=iris"])
def test_the_trail_and_the_search_page_fit_a_phone(browsing, olga, path):
    path = path.format(pk=olga[2].pk)
    page = browsing.page
    page.set_viewport_size({"width": 400, "height": 800})
    browsing.log_in("olga", PASSWORD)
    browsing.goto(path)
    expect(page.locator("[data-breadcrumb]")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    browsing.screenshot(f"phone-{path.strip('/').replace('/', '-').replace('?q=', '-')}")
    browsing.assert_clean()
