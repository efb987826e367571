"""Walks every API route and every project page and proves who gets in.

Routes are discovered from the API router and the URL resolver, so endpoints and pages added later
are covered without editing this file (tests/access.py must know how to make their objects).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from apps.projects.api.base import ProjectScopedGenericViewSet
from apps.projects.models import Project, Role
from apps.projects.permissions import ROLE_PERMISSIONS
from portal.api import router
from tests.access import OWNED_BY_ACTOR, PROJECT_OBJECT_MAKERS, USER_OBJECT_MAKERS, lookup_value
from tests.conftest import user_client
from tests.factories import UserFactory, add_member

pytestmark = pytest.mark.smoke

WRITE_METHODS = {"post", "put", "patch", "delete"}


@dataclass(frozen=True)
class ApiCase:
    basename: str
    viewset: type
    route_name: str
    detail: bool
    method: str
    action: str

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.route_name} ({self.action})"

    @property
    def model(self) -> type:
        return (
            self.viewset.queryset.model
            if self.viewset.queryset is not None
            else self.viewset.serializer_class.Meta.model
        )

    def required_perm(self) -> str:
        view = self.viewset()
        view.action = self.action
        return view.required_perm()


def api_cases() -> list[ApiCase]:
    cases = []
    for _prefix, viewset, basename in router.registry:
        for route in router.get_routes(viewset):
            for method, action in route.mapping.items():
                if not hasattr(viewset, action) or method not in viewset.http_method_names:
                    continue
                cases.append(
                    ApiCase(basename, viewset, route.name.format(basename=basename), route.detail, method, action)
                )
    return cases


API_CASES = api_cases()
PROJECT_CASES = [c for c in API_CASES if issubclass(c.viewset, ProjectScopedGenericViewSet)]
USER_CASES = [c for c in API_CASES if not issubclass(c.viewset, ProjectScopedGenericViewSet)]


def call(client: APIClient, case: ApiCase, obj: Any = None, data: dict | None = None):
    kwargs = {}
    if case.detail:
        kwargs = {case.viewset.lookup_url_kwarg or case.viewset.lookup_field: lookup_value(obj, case.viewset)}
    url = reverse(f"api:{case.route_name}", kwargs=kwargs)
    return getattr(client, case.method)(url, data or {}, format="json")


def test_every_endpoint_has_an_object_maker():
    missing = {c.model.__name__ for c in PROJECT_CASES if c.model not in PROJECT_OBJECT_MAKERS}
    missing |= {c.model.__name__ for c in USER_CASES if c.model not in USER_OBJECT_MAKERS}
    assert not missing, f"add makers for {sorted(missing)} to tests/access.py"


def test_the_router_root_lists_every_list_endpoint(world):
    response = user_client(world.alice).get("/api/v1/")
    assert response.status_code == 200
    assert set(response.json()) == {prefix for prefix, _v, _b in router.registry}


@pytest.mark.parametrize("case", API_CASES, ids=str)
def test_anonymous_gets_401(world, case):
    obj = (
        PROJECT_OBJECT_MAKERS[case.model](world.project_a, world.alice)
        if case in PROJECT_CASES
        else (USER_OBJECT_MAKERS[case.model](world.alice))
    )
    response = call(APIClient(), case, obj)
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("case", [c for c in PROJECT_CASES if c.detail], ids=str)
def test_non_member_gets_404_for_another_projects_object(world, case):
    obj = PROJECT_OBJECT_MAKERS[case.model](world.project_a, world.alice)
    response = call(user_client(world.charlie), case, obj, data={"role": "viewer", "user": "charlie"})
    assert response.status_code == 404, response.content


@pytest.mark.parametrize("case", [c for c in PROJECT_CASES if c.action == "list"], ids=str)
def test_list_shows_only_own_projects_objects(world, case):
    obj = PROJECT_OBJECT_MAKERS[case.model](world.project_a, world.alice)
    theirs = PROJECT_OBJECT_MAKERS[case.model](world.project_b, world.charlie)
    response = call(user_client(world.charlie), case)
    assert response.status_code == 200
    keys = {str(row.get(case.viewset.lookup_field, row.get("id"))) for row in response.json()["results"]}
    assert lookup_value(theirs, case.viewset) in keys
    assert lookup_value(obj, case.viewset) not in keys


def _role_cases() -> list[tuple[ApiCase, Role]]:
    """Every write on an object, and every create inside a project (creating a project needs no role)."""
    writes = [c for c in PROJECT_CASES if c.method in WRITE_METHODS]
    return [(c, role) for c in writes if c.detail or c.model is not Project for role in Role]


@pytest.mark.parametrize(("case", "role"), _role_cases(), ids=lambda v: str(v) if isinstance(v, ApiCase) else v.name)
def test_each_role_gets_exactly_its_permissions(world, case, role):
    """A role without the action's permission gets 403; a role with it gets past the check."""
    user = UserFactory(username=f"member-{role.name.lower()}")
    add_member(world.project_a, user, role)
    owner = user if case.model in OWNED_BY_ACTOR else world.alice
    obj = PROJECT_OBJECT_MAKERS[case.model](world.project_a, owner)
    data = {"project": world.project_a.slug, "user": "charlie", "role": "viewer", "name": "Renamed"}
    response = call(user_client(user), case, obj, data=data)
    if case.required_perm() in ROLE_PERMISSIONS[role]:
        assert response.status_code not in (401, 403, 404), (role, response.content)
    else:
        assert response.status_code == 403, (role, response.content)


@pytest.mark.parametrize("case", [c for c in USER_CASES if c.detail], ids=str)
def test_another_users_personal_objects_are_404(world, case):
    obj = USER_OBJECT_MAKERS[case.model](world.alice)
    response = call(user_client(world.charlie), case, obj)
    assert response.status_code == 404, response.content


# --- Pages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageCase:
    name: str
    route: str
    view: Any

    def __str__(self) -> str:
        return self.name


def _walk(patterns, prefix="", namespace=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), f"{namespace}{p.name}", p.callback


PROJECT_PAGES = [
    PageCase(name, route, view)
    for route, name, view in _walk(get_resolver().url_patterns)
    if route.startswith("p/<slug:project>/")
]


def test_every_project_page_goes_through_the_access_helper():
    assert PROJECT_PAGES, "no project pages found"
    unguarded = [c.name for c in PROJECT_PAGES if not hasattr(c.view, "required_perm")]
    assert not unguarded, f"decorate these views with @project_view: {unguarded}"


def page_url(case: PageCase, project, owner) -> str:
    kwargs = {"project": project.slug}
    if case.view.portal_model is not None:
        kwargs["pk"] = PROJECT_OBJECT_MAKERS[case.view.portal_model](project, owner).pk
    return reverse(case.name, kwargs=kwargs)


@pytest.mark.parametrize("case", PROJECT_PAGES, ids=str)
def test_anonymous_is_sent_to_login(world, client, case):
    url = page_url(case, world.project_a, world.alice)
    for method in case.view.allowed_methods:
        response = getattr(client, method.lower())(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("accounts:login"))


@pytest.mark.parametrize("case", PROJECT_PAGES, ids=str)
def test_non_member_gets_404_on_every_project_page(world, client, case):
    client.force_login(world.charlie)
    url = page_url(case, world.project_a, world.alice)
    for method in case.view.allowed_methods:
        assert getattr(client, method.lower())(url).status_code == 404


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.name)
@pytest.mark.parametrize("case", PROJECT_PAGES, ids=str)
def test_page_access_follows_the_role(world, client, case, role):
    user = UserFactory(username=f"member-{role.name.lower()}")
    add_member(world.project_a, user, role)
    client.force_login(user)
    url = page_url(case, world.project_a, world.alice)
    allowed = case.view.required_perm in ROLE_PERMISSIONS[role]
    if "GET" in case.view.allowed_methods:
        response = client.get(url)
        assert response.status_code == (200 if allowed else 403)
    elif not allowed:
        assert client.post(url).status_code == 403
