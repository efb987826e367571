"""Lists that scale, in a real browser (issue 26.6): the run list's search box, a filter that applies itself when
chosen, column headers that sort, and pages that keep all of it; the tokens page hiding the tokens the platform
mints until asked. Screenshots: test-results/e2e/test_*-<step>.png.

A bad value's 400 and its message are tests/portal/test_list_pages.py's: Chromium logs every 4xx page as a console
error, which the browsing fixture refuses."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.accounts.services import create_token, new_task_token
from apps.jobs.models import RunStatus
from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.projects.factories import PipelineRunFactory

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def run_names(page) -> list[str]:
    return page.locator("table tbody tr td:first-child a").all_inner_texts()


def test_the_run_list_searches_filters_sorts_and_pages(browsing):
    owner = UserFactory(username="rosa")
    project = ProjectFactory(owner=owner, slug="lab", name="Lab")
    for i in range(30):  # 30 "train" runs, half of them failed, and two "etl" runs
        status = RunStatus.FAILED if i % 2 else RunStatus.SUCCEEDED
        PipelineRunFactory(project=project, pipeline_name="train", number=i + 1, status=status, created_by=owner)
    for number in (31, 32):
        PipelineRunFactory(project=project, pipeline_name="etl", number=number, created_by=owner)
    page = browsing.page
    browsing.log_in("rosa", PASSWORD)
    browsing.goto("/p/lab/runs/")
    browsing.wait_for_scripts()
    expect(page.locator("[data-page-of]")).to_have_text("1 / 2")  # 32 runs, 25 a page

    page.get_by_placeholder("Search", exact=True).fill("train")
    page.get_by_placeholder("Search", exact=True).press("Enter")
    expect(page).to_have_url(re.compile(r"search=train"))
    expect(page.locator("[data-list-count]")).to_have_text("30 items")

    browsing.wait_for_scripts()
    page.locator("select[name=status]").select_option("failed")  # applies itself (data-autosubmit)
    expect(page).to_have_url(re.compile(r"status=failed"))
    expect(page.locator("[data-list-count]")).to_have_text("15 items")
    assert page.get_by_placeholder("Search", exact=True).input_value() == "train"  # the search stays

    page.locator("th a[data-sort=number]").click()  # ascending first
    expect(page).to_have_url(re.compile(r"ordering=number"))
    assert run_names(page)[:3] == ["train #2", "train #4", "train #6"]
    page.locator("th a[data-sort=number]").click()  # then descending
    expect(page).to_have_url(re.compile(r"ordering=-number"))
    expect(page.locator("th[aria-sort=descending]")).to_have_count(1)
    assert run_names(page)[:3] == ["train #30", "train #28", "train #26"]
    assert "status=failed" in page.url
    assert "search=train" in page.url

    page.get_by_placeholder("Search", exact=True).fill("")
    page.get_by_placeholder("Search", exact=True).press("Enter")
    expect(page.locator("[data-list-count]")).to_have_text("15 items")  # still only the failed ones
    expect(page).not_to_have_url(re.compile(r"search=train"))
    browsing.wait_for_scripts()
    page.locator("select[name=status]").select_option("")
    expect(page.locator("[data-list-count]")).to_have_text("32 items")
    page.locator("a[rel=next]").click()
    expect(page.locator("[data-page-of]")).to_have_text("2 / 2")
    assert "ordering=-number" in page.url  # the next page keeps the order
    assert len(run_names(page)) == 7
    browsing.screenshot("page-two")

    page.set_viewport_size({"width": 400, "height": 900})
    browsing.goto("/p/lab/runs/?search=train&status=failed")
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 400
    browsing.screenshot("400px")


def test_the_tokens_page_hides_minted_and_revoked_tokens_until_asked(browsing):
    owner = UserFactory(username="tom")
    project = ProjectFactory(owner=owner, slug="lab", name="Lab")
    create_token(owner, name="laptop")
    minted, _ = new_task_token(owner, name="run 3 task train#1", project=project, days=1)
    minted.save()
    page = browsing.page
    browsing.log_in("tom", PASSWORD)

    browsing.goto("/accounts/tokens/")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("laptop")
    browsing.screenshot("default")

    page.get_by_role("link", name="show every token").click()
    expect(rows).to_have_count(2)
    expect(page.locator("table")).to_contain_text("run 3 task train#1")
    expect(page.locator("table .badge", has_text="minted")).to_have_count(1)
    browsing.screenshot("every-token")
