"""Issue 26, point 11 in a real browser: a Chinese-speaking member sees the built-in templates' names and categories
in Chinese on the templates page and in the pipeline editor's palette, translated from the stored English by the
shipped catalogue, and finds them by the Chinese or the English words alike."""

from __future__ import annotations

import pytest
from django.utils import translation
from django.utils.translation import pgettext
from playwright.sync_api import expect

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.models import TEMPLATE_TEXT_CONTEXT
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

NAME = "Load the iris dataset"


def chinese(text: str) -> str:
    with translation.override("zh-hans"):
        shown = pgettext(TEMPLATE_TEXT_CONTEXT, text)
    assert shown != text, f"the catalogue has no Chinese for {text!r}"
    return shown


@pytest.fixture
def mei(world):
    load_builtin_templates()
    world.alice.language = "zh-hans"
    world.alice.save(update_fields=["language"])
    return world.alice


def test_the_templates_page_shows_and_finds_built_ins_in_chinese(browsing, mei):
    name, data = chinese(NAME), chinese("data")
    browsing.log_in("alice", PASSWORD)
    page = browsing.page
    browsing.goto("/p/project-a/templates/")

    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.get_by_role("heading", name=data, exact=True)).to_be_visible()
    expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.get_by_role("link", name=NAME, exact=True)).to_have_count(0)
    browsing.screenshot("templates-zh")

    for words in (name, "iris dataset"):  # what is shown, and the stored English
        search = page.locator("input#q")  # the page's own box, not the navbar's global search
        search.fill(words)
        search.press("Enter")
        expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
        expect(page.get_by_role("link", name=chinese("Train/test split"), exact=True)).to_have_count(0)

    page.get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", name=name)).to_be_visible()
    browsing.assert_clean()


def test_the_editors_palette_shows_and_finds_built_ins_in_chinese(browsing, mei):
    name, data = chinese(NAME), chinese("data")
    browsing.log_in("alice", PASSWORD)
    page = browsing.page
    browsing.goto("/p/project-a/pipelines/new/editor/")
    expect(page.locator("#pipeline-editor[data-ready]")).to_be_attached()

    iris = page.locator('[data-palette] button[data-template="iris-load"]')
    expect(iris).to_contain_text(name)
    expect(iris).not_to_contain_text(NAME)
    expect(page.locator("[data-palette] .pe-category h3", has_text=data)).to_have_count(1)
    browsing.screenshot("palette-zh")

    split = page.locator('[data-palette] button[data-template="data-split"]')
    for words in (name.split()[0], "iris dataset"):  # a word of what is shown, and the stored English
        page.fill("[data-palette-search]", words)
        expect(iris).to_be_visible()
        expect(split).to_be_hidden()
    page.fill("[data-palette-search]", "")
    expect(split).to_be_visible()

    iris.click()  # a click adds the node, which refers to the stored slug
    expect(page.locator("[data-canvas] g[data-node]")).to_have_count(1)
    browsing.assert_clean()
