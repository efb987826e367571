"""The console's pages keep the names they had before it existed (`projects:dashboard`, `projects:overview`), so the
`projects` namespace is assembled here: the projects app's own pages plus the two that gather several apps.
`p/<slug>/` comes after `p/new/`, which it would otherwise swallow."""

from django.urls import path

from apps.console import views
from apps.projects import urls as projects_urls

app_name = "projects"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("search/", views.search_page, name="search"),
    *projects_urls.urlpatterns,
    path("p/<slug:project>/", views.project_overview, name="overview"),
]
