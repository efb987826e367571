"""The service page's test console as a user meets it (issue 26, point 5): one field per model feature, "use a row
from the dataset" filling them from the data the served model trained on (through lineage), Predict answering
through the router, Explain drawing each feature's contribution (issue 28), the JSON request still there to edit,
and curl / Python snippets to the service's full URL with a token placeholder, never a token."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.monitoring.test_run_monitor import trained_version
from tests.serving.replicas import ModelServer, add_revision, iris_model, make_service

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


@pytest.fixture
def server(tmp_path):
    replica = ModelServer(iris_model(tmp_path)).start()
    yield replica
    replica.stop()


def test_the_console_fills_one_field_per_feature_from_a_training_row_and_predicts(browsing, world, server):
    _dataset_version, model_version = trained_version(world)
    service = make_service(world.project_a, "iris")
    service.model_version = model_version
    service.save(update_fields=["model_version"])
    service.current_revision = add_revision(service, 1, server)
    service.save(update_fields=["current_revision"])
    browsing.log_in("alice", PASSWORD)
    page = browsing.page
    page.set_viewport_size({"width": 1440, "height": 1000})
    browsing.goto(f"/p/project-a/services/{service.pk}/")
    browsing.wait_for_scripts()

    fields = page.locator("#console-fields input[data-feature]")
    expect(fields).to_have_count(4)
    expect(page.get_by_label("x0", exact=True)).to_have_value("0")
    curl = page.locator("#snippet-curl")
    expect(curl).to_contain_text(f"{browsing.base_url}/serving/project-a/iris/v2/models/iris/infer")
    expect(curl).to_contain_text('-H "Authorization: Bearer $PORTAL_TOKEN"')

    page.get_by_role("button", name="Use a row from the dataset").click()
    expect(page.locator("[data-row-source]")).to_have_text(re.compile(r"^iris@1, iris\.csv, row \d+$"))
    values = [float(v) for v in fields.evaluate_all("(inputs) => inputs.map((i) => i.value)")]
    assert len(values) == 4
    assert all(v > 0 for v in values)
    expect(curl).to_contain_text(f'"data":[{values[0]:g},')  # JSON.stringify writes 5.0 as 5
    expect(page.locator("#console-json")).not_to_have_attribute("open", "")  # the JSON view is one click away
    page.locator("#console-json summary").click()
    request = json.loads(page.locator("#console-request").input_value())
    assert request["inputs"][0]["shape"] == [1, 4]
    assert request["inputs"][0]["data"] == values

    page.get_by_label("x3", exact=True).fill("2.5")
    assert json.loads(page.locator("#console-request").input_value())["inputs"][0]["data"][3] == 2.5
    page.get_by_role("tab", name="Python").click()
    python = page.locator("#snippet-python")
    expect(python).to_be_visible()
    expect(python).to_contain_text("requests.post(")
    expect(python).to_contain_text("os.environ['PORTAL_TOKEN']")
    expect(python).to_contain_text("2.5]")

    page.get_by_role("button", name="Predict").click()
    expect(page.locator("[data-console-status]")).to_contain_text("200 ·")
    answer = json.loads(page.locator("#console-response").text_content())
    assert answer["outputs"][0]["shape"][0] == 1

    # Explain: SHAP values against rows of the training data, one bar per feature, largest first.
    page.get_by_role("button", name="Explain").click()
    explanation = page.locator("#console-explanation")
    expect(explanation.locator("li")).to_have_count(4)
    expect(explanation).to_contain_text("Row 0: contributions to")
    expect(explanation).to_contain_text("50 background rows (iris@1)")
    document = json.loads(page.locator("#console-response").text_content())
    assert document["method"] == "shapley-exact"
    row = document["rows"][0]
    column = row["output"].index(max(row["output"]))  # the bars are those of the predicted class
    sizes = [abs(c[column]) for c in row["contributions"]]
    expect(explanation.locator("li").first).to_contain_text(document["feature_names"][sizes.index(max(sizes))])
    page.locator("#service-console").scroll_into_view_if_needed()
    browsing.screenshot("console-1440")

    page.set_viewport_size({"width": 400, "height": 900})  # the console's own parts never widen the page
    wide = page.evaluate(
        "() => [...document.querySelectorAll('#service-console > *')]"
        ".filter((el) => el.getBoundingClientRect().right > document.documentElement.clientWidth + 1)"
        ".map((el) => el.id || el.tagName)"
    )
    assert wide == []
    page.locator("#service-console").scroll_into_view_if_needed()
    browsing.screenshot("console-400")
