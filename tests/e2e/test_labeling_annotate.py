"""Annotating in a real browser against a real Label Studio: an editor opens the annotate page of the demo's digits
labeling project (`apps/labeling/demo.py`; Label Studio's own front end, vendored, fed by the portal), picks a label
and submits; the annotation lands in Label Studio, and the labeling project's page, open in another tab, shows the
new progress without reloading.

Screenshots: test-results/e2e/<test>-<step>.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.labeling import demo, server
from apps.labeling.models import Annotation
from tests.e2e.threads import elsewhere
from tests.factories import PASSWORD
from tests.labeling.conftest import label_studio  # noqa: F401 - the session's Label Studio server (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.fixture
def digits(world, settings, label_studio, live_asgi, live_workers, tmp_path):  # noqa: F811
    settings.LABELING = "on"
    settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = label_studio.url, label_studio.token
    settings.LABELING_PORTAL_URL = live_asgi.url  # Label Studio's webhooks reach the live server
    settings.STORAGES = {
        **settings.STORAGES,
        "datasets": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path}},
    }
    # The demo's own labeling project (`make run` makes it in project "demo"), over its first three digits.
    version = demo.digits_dataset(world.project_a, world.alice, count=3)
    return demo.labeling_project(world.project_a, world.alice, version)


def test_an_editor_annotates_in_the_browser_and_the_progress_changes_live(browsing, digits, world):
    b = browsing
    b.log_in("bob", PASSWORD)  # an editor of project A, with no Label Studio account
    detail = f"/p/project-a/labeling/{digits.pk}/"
    b.goto(detail)
    expect(b.page.locator("#labeling-progress")).to_contain_text("no progress read back")
    b.page.evaluate("window.__marker = 1")

    annotator = b.page.context.new_page()
    problems: list[str] = []
    annotator.on("console", lambda m: m.type == "error" and problems.append(m.text))
    annotator.on("pageerror", lambda e: problems.append(str(e)))
    annotator.goto(b.base_url + detail + "annotate/")
    editor = annotator.locator("#label-studio")
    expect(annotator.locator("[data-annotate-task]")).to_contain_text("digit-")
    first = annotator.locator("[data-annotate-task]").inner_text()
    expect(editor.locator("img").first).to_be_visible()
    annotator.screenshot(path=str(b.screenshot("0-detail").parent / f"{b.name}-1-annotate.png"), full_page=True)
    digit = re.search(r"-(\d)\.png", first).group(1)  # the file's true digit: the label to give
    editor.get_by_role("checkbox", name=re.compile(rf"^{digit}\b")).check()
    editor.get_by_role("button", name="Submit").click()
    expect(annotator.locator("[data-annotate-status]")).to_contain_text("2 tasks still to do")
    expect(annotator.locator("[data-annotate-task]")).not_to_have_text(first)
    annotator.screenshot(path=str(b.screenshot("2-detail-before").parent / f"{b.name}-3-next.png"), full_page=True)

    # The project's page, untouched in the other tab, now says so.
    expect(b.page.locator("#labeling-progress [data-progress-labeled]")).to_have_attribute("data-progress-labeled", "1")
    expect(b.page.locator("#labeling-progress")).to_contain_text("1 labeled, 0 skipped, of 3 tasks")
    expect(b.page.locator("#labeling-progress")).to_contain_text("bob")
    assert b.page.evaluate("window.__marker") == 1, "the page reloaded"
    b.screenshot("4-detail-live")

    (row,) = elsewhere(lambda: list(Annotation.objects.select_related("task")))
    assert row.username == "bob"

    def in_label_studio():
        with server.connect() as client:
            return client.request("GET", f"/api/annotations/{row.ls_annotation_id}/")

    made = elsewhere(in_label_studio)
    assert [r["value"] for r in made["result"]] == [{"choices": [digit]}]
    assert made["task"] == row.task.ls_task_id
    assert not problems, problems
    annotator.close()
