"""A built-in job template's name, category and description are shown in the user's language, translated at
display time from the stored English (apps/jobs/builtin_text.py lists them for makemessages); a project's own
template is shown as typed, and the stored rows and the REST API stay language-free."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import translation
from django.utils.translation import trans_real

from apps.jobs.builtin import TEXT_MODULE, builtin_text_module
from apps.jobs.models import TEMPLATE_TEXT_CONTEXT, JobTemplate
from tests.conftest import user_client

NAME = "Load the iris dataset"
DESCRIPTION = (
    "Writes scikit-learn's bundled iris dataset (150 rows, 4 features, 3 classes; no download) as data.csv"
    " with a header."
)
# Stand-ins for the catalogue's entries, so that these tests do not depend on the wording of the translations.
ZH = {NAME: "加载鸢尾花数据集", "data": "数据", DESCRIPTION: "将 scikit-learn 自带的鸢尾花数据集写为 data.csv。"}


@pytest.fixture
def zh_catalogue() -> Iterator[None]:
    catalogue = trans_real.translation("zh-hans")._catalog
    keys = {f"{TEMPLATE_TEXT_CONTEXT}\x04{en}": zh for en, zh in ZH.items()}
    saved = {key: catalogue.get(key) for key in keys}
    for key, zh in keys.items():
        catalogue[key] = zh
    yield
    for key, before in saved.items():
        if before is None:
            for part in catalogue._catalogs:
                part.pop(key, None)
        else:
            catalogue[key] = before


def client_in(user, language: str) -> Client:
    user.language = language
    user.save(update_fields=["language"])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def chinese(world, zh_catalogue) -> Iterator[Client]:
    yield client_in(world.alice, "zh-hans")
    translation.activate(settings.LANGUAGE_CODE)  # a request leaves its language active in this thread


@pytest.fixture
def english(world, zh_catalogue) -> Client:
    return client_in(world.alice, "en")


def url(name: str, **kwargs) -> str:
    return reverse(f"jobs:{name}", kwargs={"project": "project-a", **kwargs})


def page(client: Client, address: str) -> str:
    response = client.get(address)
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def palette(client: Client) -> dict[str, dict]:
    match = re.search(
        r'<script id="editor-data" type="application/json">(.*?)</script>',
        page(client, url("pipeline-editor-new")),
        re.S,
    )
    assert match
    return {entry["slug"]: entry for entry in json.loads(match.group(1))["templates"]}


def iris() -> JobTemplate:
    return JobTemplate.objects.filter(project=None, slug="iris-load").order_by("-version").first()


def test_the_templates_pages_show_a_built_in_in_chinese(chinese):
    listing = page(chinese, url("template-list"))
    assert ZH[NAME] in listing
    assert f">{ZH['data']}</h2>" in listing
    assert NAME not in listing

    detail = page(chinese, url("template-detail", pk=iris().pk))
    assert ZH[NAME] in detail
    assert ZH[DESCRIPTION] in detail
    assert NAME not in detail


def test_the_editors_palette_shows_a_built_in_in_chinese(chinese):
    entry = palette(chinese)["iris-load"]
    assert (entry["name"], entry["category"], entry["description"]) == (ZH[NAME], ZH["data"], ZH[DESCRIPTION])
    assert entry["slug"] == "iris-load"  # what a node refers to stays the stored slug


def test_an_english_user_sees_the_stored_english(english):
    assert NAME in page(english, url("template-list"))
    entry = palette(english)["iris-load"]
    assert (entry["name"], entry["category"], entry["description"]) == (NAME, "data", DESCRIPTION)


def test_a_projects_own_template_is_shown_as_typed(chinese, world):
    mine = JobTemplate.objects.create(
        project=world.project_a, slug="mine", name=NAME, category="data", description=DESCRIPTION, command=["true"]
    )
    assert (mine.display_name, mine.display_category, mine.display_description) == (NAME, "data", DESCRIPTION)
    entry = palette(chinese)["mine"]
    assert (entry["name"], entry["category"], entry["description"]) == (NAME, "data", DESCRIPTION)
    detail = page(chinese, url("template-detail", pk=mine.pk))
    assert NAME in detail
    assert ZH[NAME] not in detail


def test_the_stored_rows_and_the_api_stay_in_english(chinese, world):
    assert iris().name == NAME
    translation.activate("zh-hans")
    response = user_client(world.alice).get("/api/v1/templates/", {"slug": "iris-load"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200
    body = json.dumps(response.json(), ensure_ascii=False)
    assert NAME in body
    assert ZH[NAME] not in body


def test_an_empty_description_is_not_the_catalogue_header(chinese):
    with translation.override("zh-hans"):
        assert JobTemplate(project=None, slug="x", name="x", description="").display_description == ""


def test_builtin_text_is_current_with_the_fixture():
    """Adding or changing a built-in template: run `manage.py builtin_text`, then `make messages`."""
    assert TEXT_MODULE.read_text(encoding="utf-8") == builtin_text_module(), "run `manage.py builtin_text`"
    call_command("builtin_text", "--check")
    source = TEXT_MODULE.read_text(encoding="utf-8")
    for text in (NAME, "data", DESCRIPTION):
        assert json.dumps(text, ensure_ascii=False) in source or repr(text) in source


def test_the_check_fails_when_the_module_is_stale(tmp_path, monkeypatch):
    stale = tmp_path / "builtin_text.py"
    stale.write_text("TEXTS = ()\n", encoding="utf-8")
    monkeypatch.setattr("apps.jobs.management.commands.builtin_text.TEXT_MODULE", stale)
    with pytest.raises(CommandError, match="out of date"):
        call_command("builtin_text", "--check")
    call_command("builtin_text")
    assert stale.read_text(encoding="utf-8") == builtin_text_module()


def test_the_templates_page_finds_a_built_in_by_its_shown_or_its_stored_text(chinese):
    for query in (ZH[NAME], "iris dataset", "IRIS-LOAD"):
        listing = page(chinese, url("template-list") + f"?q={query}")
        assert ZH[NAME] in listing, query
        assert "data-split@" not in listing, query
    assert "iris-load@" not in page(chinese, url("template-list") + "?q=鸢尾 nothing-like-this")


def test_the_palette_searches_the_stored_english_too(chinese):
    search = palette(chinese)["iris-load"]["search"]
    assert ZH[NAME].lower() in search
    assert NAME.lower() in search
    assert "iris-load" in search
