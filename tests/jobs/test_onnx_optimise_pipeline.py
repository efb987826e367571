"""The onnx-optimise template end to end through a real local agent, on CPU: a pipeline loads the iris dataset, splits
it, trains and registers a classifier, then optimises the registered version, measured on the dataset version's
held-out rows. The table is logged to tracking (artifact and metrics), the chosen variant is registered as version 2 of
flavour onnx, tagged with version 1, the alias moved to it, and the version page shows the table and the lineage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from apps.models.models import ModelAlias, ModelVersion
from apps.serving.replicas import model_format
from tests.jobs.conftest import assert_succeeded, onnx_python  # noqa: F401 (fixture: skips without the ONNX packages)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

SPEC = {
    "parallelism": 0,
    "failure_policy": "fail_fast",
    "nodes": [
        {"name": "load", "template": "dataset-load", "args": {"dataset": "iris@1"}},
        {"name": "split", "template": "data-split", "depends_on": ["load"], "args": {"test_size": 0.3, "seed": 7}},
        {"name": "train", "template": "sklearn-train", "depends_on": ["split"], "args": {"label_column": "species"}},
        {
            "name": "register",
            "template": "model-register",
            "depends_on": ["train"],
            "args": {"name": "iris", "alias": ""},
        },
        {
            "name": "optimise",
            "template": "onnx-optimise",
            "depends_on": ["register"],
            "args": {"dataset": "iris@1", "test_size": 0.3, "seed": 7, "latency_runs": 5, "alias": "onnx"},
        },
    ],
}


@pytest.mark.usefixtures("onnx_python")
def test_the_template_registers_an_onnx_version_with_its_table(client, iris_lab):
    owner, project = iris_lab.owner, iris_lab.project

    run = iris_lab.run("optimise", SPEC)

    assert_succeeded(run)
    task = run.tasks.filter(node="optimise").latest("attempt")
    out = Path(task.output_dir)
    table = json.loads((out / "optimisation.json").read_text())
    rows = {row[0]: dict(zip(table["columns"], row, strict=True)) for row in table["data"]}
    assert list(rows) == ["original", "fp32", "int8", "fp16"]
    assert all(row["accuracy_drop"] <= 0.05 for row in rows.values())

    source = ModelVersion.objects.get(registered_model__project=project, registered_model__name="iris", version=1)
    optimised = ModelVersion.objects.get(registered_model=source.registered_model, version=2)
    tags = {tag.key: tag.value for tag in optimised.tags.all()}
    assert tags["portal.optimised_from"] == "iris/1"
    variant = tags["portal.optimisation"]
    assert variant in rows
    assert model_format(optimised.source) == "onnx"
    assert model_format(source.source) == "sklearn"
    assert ModelAlias.objects.get(registered_model=source.registered_model, alias="onnx").model_version == optimised
    tracked = optimised.run
    latest = {m.key: m.value for m in tracked.latest_metrics.all()}
    assert latest["accuracy_original"] == pytest.approx(rows["original"]["accuracy"])
    assert latest[f"size_bytes_{variant}"] == rows[variant]["size_bytes"]
    assert {"latency_ms_fp32", "accuracy_drop_int8", "size_ratio_fp16"} <= set(latest)
    assert {t.key: t.value for t in tracked.tags.all()}["portal.optimised_from"] == "models:/iris/1"
    assert "| variant | accuracy | drop |" in "".join(task.log_lines.values_list("text", flat=True))

    client.force_login(owner)
    html = client.get(reverse("models:version-detail", kwargs={"project": "project-a", "pk": optimised.pk})).content
    page = html.decode()
    assert 'id="optimisation"' in page
    assert "Optimised from" in page
    assert reverse("models:version-detail", kwargs={"project": "project-a", "pk": source.pk}) in page
    assert f'<tr class="table-primary" aria-current="true"><td>{variant}</td>' in page
    for name in rows:
        assert f"<td>{name}</td>" in page
    plain = client.get(reverse("models:version-detail", kwargs={"project": "project-a", "pk": source.pk}))
    assert 'id="optimisation"' not in plain.content.decode()  # the trained version has no table
    optimised_url = reverse("models:version-detail", kwargs={"project": "project-a", "pk": optimised.pk})
    assert f'Optimised as <a href="{optimised_url}">iris v2</a>' in plain.content.decode()  # and links its ONNX one
