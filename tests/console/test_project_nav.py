"""A project page's navigation and breadcrumb (`{% project_nav %}`, `{% project_crumbs %}`): the section of each tab
comes from one index of the navigation's groups, and the project switcher is one query however many projects the
member has."""

from __future__ import annotations

import pytest
from django.template import Context
from django.test import RequestFactory
from django.urls import reverse

from apps.console.templatetags.project_nav import GROUPS, SWITCHER_LIMIT, project_crumbs
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def crumbs_for(user, project, tab: str, path: str = "/"):
    request = RequestFactory().get(path)
    request.user = user
    return project_crumbs(Context({"request": request}), project, tab)


def test_every_tab_of_the_navigation_is_a_section_of_the_breadcrumb(world):
    for _key, _label, pages in GROUPS:
        for tab, label, url_name in pages:
            url = reverse(url_name, kwargs={"project": world.project_a.slug})
            section = crumbs_for(world.alice, world.project_a, tab, path=url).section
            assert (section.label, section.url, section.active) == (label, url, True)
    assert crumbs_for(world.alice, world.project_a, "no-such-tab").section is None


def test_the_switcher_is_one_query_and_opens_the_same_section(world, django_assert_num_queries):
    for number in range(SWITCHER_LIMIT + 3):
        ProjectFactory(owner=world.alice, slug=f"other-{number:02d}", name=f"Other {number:02d}")

    with django_assert_num_queries(1):
        crumbs = crumbs_for(world.alice, world.project_a, "datasets")

    assert len(crumbs.others) == SWITCHER_LIMIT
    assert crumbs.more
    assert crumbs.others[0] == ("Other 00", reverse("datasets:dataset-list", kwargs={"project": "other-00"}))
    audit = crumbs_for(world.alice, world.project_a, "audit")  # admin-only: others open on their overview
    assert audit.others[0][1] == reverse("projects:overview", kwargs={"project": "other-00"})
