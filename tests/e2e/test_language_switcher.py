"""The navbar's language switcher in a real browser: an anonymous visitor on the login page, and a signed-in user
whose page scripts then speak Chinese through /jsi18n/ (no console error on the way)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_an_anonymous_visitor_reads_the_login_page_in_chinese(browsing):
    page = browsing.page
    browsing.goto("/accounts/login/")

    page.locator("[data-language-switcher]").get_by_label("Language").select_option("zh-hans")  # submits

    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page).to_have_url(browsing.base_url + "/accounts/login/")
    expect(page.get_by_label("用户名")).to_be_visible()
    expect(page.locator("[data-language-switcher] select")).to_have_value("zh-hans")
    browsing.screenshot("login-zh")


def test_a_user_switches_and_the_page_scripts_speak_chinese(browsing):
    UserFactory(username="mei")
    browsing.log_in("mei", PASSWORD)
    page = browsing.page
    browsing.wait_for_scripts()
    assert page.evaluate("gettext('Running')") == "Running"

    page.locator("[data-language-switcher]").get_by_label("Language").select_option("zh-hans")

    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.get_by_role("link", name="通知")).to_be_visible()  # "Notifications", in the navbar
    browsing.wait_for_scripts()  # the new page's catalogue (/jsi18n/, a deferred script) may still be loading
    assert page.evaluate("gettext('Running')") == "运行中"
    browsing.goto("/accounts/profile/")
    expect(page.get_by_label("语言", exact=True).first).to_have_value("zh-hans")  # the saved choice
    browsing.screenshot("profile-zh")
