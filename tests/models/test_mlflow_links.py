"""MLflow UI links (`/#/experiments/<id>/runs/<run>` as the client prints them): every page loads the script that
sends the fragment's ids to `models:mlflow-link`, which redirects to the portal's page for whoever may see it.
The browser half is tests/e2e/test_mlflow_links.py."""

from __future__ import annotations

from django.urls import reverse

from apps.projects.models import Role
from tests.factories import add_member, model_version, registered_model, tracking_run

LINK = "/mlflow-ui/"


def page(name: str, project: str, pk: int) -> str:
    return reverse(f"models:{name}", kwargs={"project": project, "pk": pk})


def test_it_redirects_to_the_run_experiment_model_and_version_pages(world, client):
    run = tracking_run(world.project_a, world.alice, name="r1")
    version = model_version(world.project_a, world.alice, "clf")
    client.force_login(world.bob)  # a member, not the owner
    assert client.get(LINK, {"run": run.run_uuid}).url == page("run-detail", "project-a", run.pk)
    assert client.get(LINK, {"experiment": run.experiment_id}).url == page(
        "experiment-detail", "project-a", run.experiment_id
    )
    model = version.registered_model
    assert client.get(LINK, {"model": "clf"}).url == page("model-detail", "project-a", model.pk)
    assert client.get(LINK, {"model": "project-a/clf", "version": "1"}).url == page(
        "version-detail", "project-a", version.pk
    )


def test_others_and_unknown_ids_get_a_404_and_anonymous_visitors_log_in_first(world, client):
    run = tracking_run(world.project_a, world.alice)
    registered_model(world.project_a, "shared-name")
    registered_model(world.project_b, "shared-name")
    client.force_login(world.charlie)
    for query in ({"run": run.run_uuid}, {"experiment": run.experiment_id}, {"model": "project-a/shared-name"}):
        assert client.get(LINK, query).status_code == 404, query
    # charlie's own bare name is unambiguous for him; for a user of both projects it would be a guess
    assert client.get(LINK, {"model": "shared-name"}).status_code == 302
    add_member(world.project_b, world.alice, Role.VIEWER)
    client.force_login(world.alice)
    assert client.get(LINK, {"model": "shared-name"}).status_code == 404
    for query in ({}, {"run": "0" * 32}, {"experiment": "x"}, {"model": "clf", "version": "9"}):
        assert client.get(LINK, query).status_code == 404, query
    client.logout()
    response = client.get(LINK, {"run": run.run_uuid})
    assert response.status_code == 302
    assert response.url.startswith(reverse("accounts:login") + "?next=/mlflow-ui/")


def test_every_page_loads_the_script_with_the_target(world, client):
    expected = 'src="/static/js/mlflow-links.js" data-target="/mlflow-ui/"'
    assert expected in client.get(reverse("accounts:login")).content.decode()
    client.force_login(world.alice)
    assert expected in client.get("/").content.decode()
