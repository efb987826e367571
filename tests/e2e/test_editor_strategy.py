"""The pipeline editor's strategy field in a real browser: a distributed node's properties panel shows its layout,
a strategy that cannot run shows its error under the field (naming the field), and a good one updates the layout and
is saved with the node (docs/distributed.md)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from apps.jobs.builtin import load_builtin_templates
from apps.jobs.services import save_pipeline
from tests.e2e.test_editor import field, node, open_editor
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]


def test_a_distributed_node_shows_its_layout_and_its_strategys_errors(browsing, world):
    b = browsing
    load_builtin_templates()
    spec = {"nodes": [{"name": "train", "template": "pytorch-ddp-train"}]}
    pipe = save_pipeline(world.project_a, world.alice, name="fit", spec=spec)
    b.log_in("alice", PASSWORD)
    open_editor(b, f"/p/project-a/pipelines/{pipe.pk}/editor/")

    node(b, "train").locator("rect").first.click()
    layout = b.page.locator("[data-panel] [data-strategy-layout]")
    expect(layout).to_have_text("Layout: world 2 = dp 2 × tp 1 × pp 1, ddp, fp32")

    # Two replicas on CPU cannot split the model in three: the server's check says so under the field.
    field(b, "strategy").fill(json.dumps({"type": "fsdp", "tensor_parallel": 3}))
    field(b, "strategy").press("Tab")
    expect(b.page.locator("[data-panel]")).to_contain_text("tensor_parallel: 3 does not divide the world size 2")
    expect(field(b, "strategy")).to_have_attribute("aria-invalid", "true")
    expect(layout).to_have_text("Check the pipeline to see the layout.")
    b.screenshot("1-strategy-error")

    field(b, "strategy").fill(json.dumps({"type": "fsdp", "gradient_accumulation": 4, "precision": "bf16"}))
    field(b, "strategy").press("Tab")
    expect(layout).to_have_text("Layout: world 2 = dp 2 × tp 1 × pp 1, fsdp, bf16, accumulate 4")
    b.page.get_by_role("button", name="Save").click()
    expect(b.page.locator("[data-status]")).to_have_text("Saved.")
    pipe.refresh_from_db()
    assert pipe.spec["nodes"][0]["strategy"] == {"type": "fsdp", "gradient_accumulation": 4, "precision": "bf16"}
    b.screenshot("2-strategy-layout")
    b.assert_clean()
