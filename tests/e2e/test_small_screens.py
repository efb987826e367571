"""Small screens (issue 26.12): at 400, 800 and 1440 px no page of the newcomer's journey — nor the capacity page,
the audit logs and the staff navbar — scrolls sideways. A wide table scrolls inside its own box, its first column
staying in view; the document itself never gets wider than the viewport.

The pages hold what the journey leaves behind (the demo's dataset, pipeline, experiment, model and service, a run
with a long failure reason), made without running anything, so the test needs no agent. Each page at 400 px is
saved as test-results/e2e/test_no_page_of_the_journey_scrolls_sideways-400-<page>.png.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.console.demo import populate
from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline, RunStatus, TaskStatus
from apps.models.models import Experiment, RegisteredModel, Run
from apps.serving.models import InferenceService
from tests.factories import PASSWORD, ProjectFactory, UserFactory
from tests.projects.factories import NotebookFactory, PipelineRunFactory, TaskRunFactory, agent, task_workload

pytestmark = [pytest.mark.e2e, pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

WIDTHS = (400, 800, 1440)
# How far the document is wider than the viewport: 0 unless the page scrolls sideways.
OVERFLOW = "document.scrollingElement.scrollWidth - document.documentElement.clientWidth"
# What sticks out: the outermost elements past the viewport's right edge (a failure names them).
CULPRITS = """() => {
  const width = document.documentElement.clientWidth;
  const out = [...document.querySelectorAll("body *")].filter((el) => el.getBoundingClientRect().right > width + 1);
  return out.filter((el) => !out.includes(el.parentElement)).slice(0, 4)
    .map((el) => `${el.tagName.toLowerCase()}.${[...el.classList].join(".")}`
      + ` (${Math.round(el.getBoundingClientRect().right)} px)`);
}"""


def journey_pages() -> dict[str, str]:
    """The journey's pages (and the staff's), by a short name, with the demo's rows in them."""
    owner = UserFactory(username="nina")
    owner.is_staff = owner.is_superuser = True  # the staff navbar, the capacity page and the global audit log
    owner.save()
    project = ProjectFactory(owner=owner, slug="iris-lab", name="Iris lab")
    pipeline = populate(project, owner)
    run = PipelineRunFactory(
        project=project,
        pipeline=pipeline,
        pipeline_name=pipeline.name,
        created_by=owner,
        status=RunStatus.FAILED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        reason="train failed: exit code 1 (ValueError: Input contains NaN, infinity or a value too large for dtype)",
        nodes=[n["name"] for n in pipeline.spec["nodes"]],
    )
    tasks = [
        TaskRunFactory(run=run, node=node["name"], status=TaskStatus.SUCCEEDED, started_at=timezone.now())
        for node in run.spec["nodes"]
    ]
    # The capacity page's tables: an agent of this machine, with a task's workload on it.
    task_workload(tasks[-1], on=agent(hostname="gpu-node-with-a-rather-long-host-name.example.internal", gpus=2))
    NotebookFactory(project=project, owner=owner, name="exploration-of-the-iris-measurements")
    dataset = Dataset.objects.get(project=project)
    version = dataset.versions.order_by("-number").first()
    experiment = Experiment.objects.filter(project=project).order_by("pk").first()
    tracked = Run.objects.filter(experiment=experiment).order_by("pk").first()
    model = RegisteredModel.objects.get(project=project)
    service = InferenceService.objects.filter(project=project).first()
    p = "/p/iris-lab"
    pages = {
        "dashboard": "/",
        "project-create": "/p/new/",
        "overview": f"{p}/",
        "datasets": f"{p}/datasets/",
        "dataset-create": f"{p}/datasets/new/",
        "dataset": f"{p}/datasets/{dataset.pk}/",
        "dataset-upload": f"{p}/datasets/{dataset.pk}/upload/",
        "dataset-version": f"{p}/dataset-versions/{version.pk}/",
        "pipelines": f"{p}/pipelines/",
        "editor": f"{p}/pipelines/{Pipeline.objects.get(pk=pipeline.pk).pk}/editor/",
        "pipeline": f"{p}/pipelines/{pipeline.pk}/",
        "runs": f"{p}/runs/",
        "run": f"{p}/runs/{run.pk}/",
        "experiments": f"{p}/experiments/",
        "experiment": f"{p}/experiments/{experiment.pk}/",
        "tracking-run": f"{p}/tracking-runs/{tracked.pk}/",
        "models": f"{p}/models/",
        "model": f"{p}/models/{model.pk}/",
        "services": f"{p}/services/",
        "service-create": f"{p}/services/new/",
        "notebooks": f"{p}/notebooks/",
        "project-audit": f"{p}/audit/",
        "tokens": "/accounts/tokens/",
        "capacity": "/capacity/",
        "audit": "/audit/",
    }
    if service is not None:
        pages["service"] = f"{p}/services/{service.pk}/"
    return pages


def test_no_page_of_the_journey_scrolls_sideways(browsing):
    pages = journey_pages()
    page = browsing.page
    browsing.log_in("nina", PASSWORD)
    wider: list[str] = []

    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            response = page.goto(browsing.base_url + path)
            assert response.status == 200, (path, response.status)
            browsing.wait_for_scripts()
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                culprits = ", ".join(page.evaluate(CULPRITS))
                wider.append(f"{name} at {width} px: {overflow} px too wide ({path}): {culprits}")
            if width == 400:
                browsing.screenshot(f"400-{name}")

    assert not wider, "\n".join(wider)
