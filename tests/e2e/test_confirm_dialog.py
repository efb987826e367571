"""Actions that hurt ask first, in the portal's one dialog (templates/includes/confirm_dialog.html) rather than the
browser's `window.confirm`: the dialog says what will happen, Cancel leaves everything as it was (a role <select>
goes back to its value), Confirm does it. Issue 26, point 3."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.accounts.models import ApiToken
from apps.models.registry import set_alias
from apps.projects.models import Membership, Role
from tests.factories import PASSWORD, ProjectFactory, UserFactory, add_member, make_token, model_version
from tests.serving.factories import service

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.fixture
def no_native_dialogs(browsing):
    """Every `window.confirm`/`alert` the page opens, which these pages must never do."""
    opened: list[str] = []
    browsing.page.on("dialog", lambda dialog: (opened.append(dialog.message), dialog.dismiss()))
    yield opened
    assert opened == []


def dialog(page):
    return page.locator("#confirm-dialog")


def test_revoking_a_token_says_who_is_refused_and_cancel_keeps_it(browsing, no_native_dialogs):
    owner = UserFactory(username="olga")
    make_token(owner, name="ci")
    token = ApiToken.objects.get(user=owner, name="ci")
    browsing.log_in("olga", PASSWORD)
    page = browsing.page
    browsing.goto("/accounts/tokens/")
    browsing.wait_for_scripts()

    page.get_by_role("button", name="Revoke").click()
    expect(dialog(page)).to_be_visible()
    expect(dialog(page).locator("#confirm-title")).to_have_text("Revoke this token?")
    expect(dialog(page).locator("#confirm-body")).to_contain_text(f"starting with {token.prefix} is refused")
    expect(dialog(page).locator("#confirm-cancel")).to_be_focused()  # Enter does not revoke by accident
    browsing.screenshot("revoke-asks")
    dialog(page).get_by_role("button", name="Cancel").click()
    expect(dialog(page)).to_be_hidden()
    token.refresh_from_db()
    assert token.revoked_at is None

    page.get_by_role("button", name="Revoke").click()
    dialog(page).locator("#confirm-accept").click()
    expect(page.get_by_role("button", name="Revoke")).to_have_count(0)  # the list hides revoked tokens
    token.refresh_from_db()
    assert token.revoked_at is not None
    browsing.goto("/accounts/tokens/?state=revoked")
    expect(page.get_by_text("revoked", exact=True)).to_be_visible()


def test_changing_a_role_asks_and_a_cancelled_change_puts_the_select_back(browsing, no_native_dialogs):
    owner = UserFactory(username="olga")
    ada = UserFactory(username="ada")
    project = ProjectFactory(owner=owner, slug="lab", name="Lab")
    add_member(project, ada, Role.VIEWER)
    browsing.log_in("olga", PASSWORD)
    page = browsing.page
    browsing.goto("/p/lab/members/")
    browsing.wait_for_scripts()
    role = page.get_by_role("combobox", name="Role of ada")

    role.select_option("editor")
    expect(dialog(page).locator("#confirm-title")).to_have_text("Change the role of ada?")
    expect(dialog(page).locator("#confirm-body")).to_have_text(
        "What ada may see and do in this project changes at once."
    )
    dialog(page).get_by_role("button", name="Cancel").click()
    expect(role).to_have_value("viewer")
    assert Membership.objects.get(project=project, user=ada).role == Role.VIEWER

    role.select_option("editor")
    with page.expect_response(lambda response: "/role/" in response.url) as answered:
        dialog(page).get_by_role("button", name="Change role").click()
    assert answered.value.ok
    expect(dialog(page)).to_be_hidden()
    expect(page.get_by_role("combobox", name="Role of ada")).to_have_value("editor")  # the panel, redrawn by htmx
    assert Membership.objects.get(project=project, user=ada).role == Role.EDITOR


def test_deleting_an_alias_names_the_services_that_follow_it(browsing, no_native_dialogs):
    owner = UserFactory(username="olga")
    project = ProjectFactory(owner=owner, slug="lab", name="Lab")
    version = model_version(project, owner, model_name="iris-classifier")
    set_alias(version.registered_model, "production", 1)
    service(project, owner, name="iris-live", registered_model=version.registered_model, follow_alias="production")
    browsing.log_in("olga", PASSWORD)
    page = browsing.page
    browsing.goto(f"/p/lab/models/{version.registered_model_id}/")
    browsing.wait_for_scripts()

    page.get_by_role("button", name="Delete alias production").click()
    expect(dialog(page).locator("#confirm-title")).to_have_text("Delete alias @production?")
    expect(dialog(page).locator("#confirm-body")).to_contain_text("Services follow @production: iris-live.")
    browsing.screenshot("alias-asks")
    dialog(page).locator("#confirm-accept").click()
    expect(page.locator("#aliases")).to_contain_text("No aliases.")
    assert not version.registered_model.aliases.exists()
