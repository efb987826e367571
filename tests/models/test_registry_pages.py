"""The registry pages: models, versions, aliases (set, move, delete) and the model card editor."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.models.models import ModelAlias, ModelVersion
from apps.models.registry import create_model_version, set_alias
from apps.models.views.markdown import render_markdown
from apps.projects.models import Role
from apps.serving.models import InferenceService, Revision
from tests.factories import UserFactory, add_member, model_version, registered_model, tracking_run
from tests.serving.factories import service


@pytest.fixture
def versions(world):
    v1 = model_version(world.project_a, world.alice, model_name="iris-classifier")
    run = tracking_run(world.project_a, world.alice, name="second")
    v2 = create_model_version(v1.registered_model, source=f"runs:/{run.run_uuid}/model", run=run)
    set_alias(v1.registered_model, "staging", 2)
    return v1, v2


@pytest.fixture
def viewer(world):
    user = UserFactory(username="vera")
    add_member(world.project_a, user, Role.VIEWER)
    return user


def model_url(version: ModelVersion, name: str = "model-detail") -> str:
    return reverse(f"models:{name}", kwargs={"project": "project-a", "pk": version.registered_model_id})


def version_url(version: ModelVersion, name: str = "version-detail") -> str:
    return reverse(f"models:{name}", kwargs={"project": "project-a", "pk": version.pk})


@pytest.mark.smoke
def test_model_list_shows_latest_version_and_aliases(world, client, versions):
    registered_model(world.project_a, "unversioned")
    client.force_login(world.bob)
    html = client.get(reverse("models:model-list", kwargs={"project": "project-a"})).content.decode()
    row = html.split(">iris-classifier</a>", 1)[1].split("</tr>", 1)[0]
    assert "v2" in row
    assert "2 versions" in row
    assert "@staging → v2" in row
    assert "unversioned" in html


def test_model_list_empty_state(world, client):
    client.force_login(world.alice)
    html = client.get(reverse("models:model-list", kwargs={"project": "project-a"})).content.decode()
    assert "No registered models yet." in html


def test_model_page_lists_versions_with_status_run_and_aliases(world, client, versions):
    v1, v2 = versions
    client.force_login(world.alice)
    html = client.get(model_url(v1)).content.decode()
    table = html.split('id="versions"', 1)[1].split("</table>", 1)[0]
    assert "v1" in table
    assert "v2" in table
    assert "Ready" in table
    assert reverse("models:run-detail", kwargs={"project": "project-a", "pk": v2.run_id}) in table
    assert "@staging" in table
    assert 'id="alias-form"' in html


def test_an_editor_sets_moves_and_deletes_an_alias(world, client, versions):
    v1, v2 = versions
    client.force_login(world.bob)
    url = model_url(v1, "model-alias")
    response = client.post(url, {"alias": "production", "version": "1", "action": "set"})
    assert response.status_code == 302
    assert ModelAlias.objects.get(alias="production").model_version == v1
    client.post(url, {"alias": "production", "version": "2", "action": "set"})
    assert ModelAlias.objects.get(alias="production").model_version == v2
    client.post(url, {"alias": "production", "action": "delete"})
    assert not ModelAlias.objects.filter(alias="production").exists()
    page = client.get(model_url(v1)).content.decode()
    assert "Alias “production” deleted." in page


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"alias": "v3", "version": "1", "action": "set"}, "Alias cannot be &#x27;latest&#x27;"),
        ({"alias": "bad name!", "version": "1", "action": "set"}, "Names may only contain alphanumerics"),
        ({"alias": "prod", "version": "", "action": "set"}, "Choose the version the alias points at."),
        ({"alias": "prod", "version": "9", "action": "set"}, "Select a valid choice."),
    ],
)
def test_bad_alias_input_is_a_form_error(world, client, versions, data, message):
    client.force_login(world.alice)
    response = client.post(model_url(versions[0], "model-alias"), data)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_a_viewer_sees_the_registry_but_cannot_change_aliases_or_cards(world, client, versions, viewer):
    v1, _v2 = versions
    client.force_login(viewer)
    page = client.get(model_url(v1)).content.decode()
    assert "@staging" in page
    assert 'id="alias-form"' not in page
    assert client.post(model_url(v1, "model-alias"), {"alias": "production", "version": "1"}).status_code == 403
    assert client.post(model_url(v1, "model-alias"), {"alias": "staging", "action": "delete"}).status_code == 403
    assert ModelAlias.objects.filter(alias="staging").exists()
    version_page = client.get(version_url(v1)).content.decode()
    assert 'id="card-form"' not in version_page
    assert client.post(version_url(v1, "version-card"), {"model_card": "# mine"}).status_code == 403
    v1.refresh_from_db()
    assert "mine" not in v1.model_card


def test_version_page_shows_lineage_and_the_default_card(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.alice)
    html = client.get(version_url(v1)).content.decode()
    lineage = html.split('id="lineage"', 1)[1].split("</ol>", 1)[0]
    assert reverse("models:run-detail", kwargs={"project": "project-a", "pk": v1.run_id}) in lineage
    assert "iris-classifier v1" in lineage
    card = html.split('id="card"', 1)[1]
    for section in ("Intended use", "Metrics", "Data", "Limitations"):
        assert f">{section}</h5>" in card


def test_version_page_names_the_services_serving_it_and_their_role(world, client, versions):
    v1, v2 = versions
    current = service(world.project_a, name="iris-live", status=InferenceService.Status.READY)
    current.current_revision = Revision.objects.create(service=current, number=1, model_version=v2)
    current.canary_revision = Revision.objects.create(service=current, number=2, model_version=v1)
    current.canary_percent = 10
    current.save()
    elsewhere = service(world.project_b, name="iris-b")
    elsewhere.current_revision = Revision.objects.create(service=elsewhere, number=1, model_version=v2)
    elsewhere.save()
    client.force_login(world.alice)

    lineage = client.get(version_url(v2)).content.decode().split('id="lineage"', 1)[1].split("</ol>", 1)[0]
    served = lineage.split('data-use="iris-live"', 1)[1].split("</li>", 1)[0]
    assert reverse("serving:service-detail", kwargs={"project": "project-a", "pk": current.pk}) in served
    assert "current revision · Ready" in served
    assert "iris-b" not in lineage
    assert "No service serves this version." not in lineage

    canary = client.get(version_url(v1)).content.decode().split('id="lineage"', 1)[1].split("</ol>", 1)[0]
    assert "canary, 10% of traffic" in canary

    unused = model_version(world.project_a, world.alice, model_name="other")
    html = client.get(version_url(unused)).content.decode()
    assert "No service serves this version." in html
    assert ">Stage</dt>" not in html  # the legacy stage "None" is not shown as if it meant something


def test_an_editor_saves_the_card_and_html_in_it_is_escaped(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.bob)
    card = "## Intended use\n\nIris **species**.<script>alert(1)</script>\n\n- a\n- [x](javascript:alert(1))\n"
    response = client.post(version_url(v1, "version-card"), {"model_card": card})
    assert response.status_code == 302
    v1.refresh_from_db()
    assert v1.model_card.replace("\r\n", "\n") == card.strip()
    html = client.get(version_url(v1)).content.decode().split('id="card"', 1)[1].split("</div>", 1)[0]
    assert "<strong>species</strong>" in html
    assert "&lt;script&gt;" in html
    assert "<script>alert" not in html
    assert 'href="javascript' not in html
    preview = client.post(version_url(v1, "version-card-preview"), {"model_card": "# Hi <b>"}).content.decode()
    assert "<h4>Hi &lt;b&gt;</h4>" in preview


def test_markdown_renders_tables_code_and_safe_links():
    html = render_markdown("| a | b |\n|---|---|\n| 1 | 2 |\n\n```\n<x>\n```\n[ok](https://example.org) `c`")
    assert '<th scope="col">a</th>' in html
    assert "<td>2</td>" in html
    assert "<pre><code>&lt;x&gt;</code></pre>" in html
    assert '<a href="https://example.org" rel="nofollow noopener">ok</a>' in html
    assert "<code>c</code>" in html
    assert "<a" not in render_markdown('[x](data:text/html,hi) [y](" onclick="z)')


def test_every_registry_page_is_404_for_an_outsider(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.charlie)
    for url in [reverse("models:model-list", kwargs={"project": "project-a"}), model_url(v1), version_url(v1)]:
        assert client.get(url).status_code == 404, url
    for url in [model_url(v1, "model-alias"), version_url(v1, "version-card"), version_url(v1, "version-card-preview")]:
        assert client.post(url, {"alias": "x", "version": "1", "model_card": "x"}).status_code == 404, url
    # project B's URL with A's ids
    other = reverse("models:model-detail", kwargs={"project": "project-b", "pk": v1.registered_model_id})
    assert client.get(other).status_code == 404
