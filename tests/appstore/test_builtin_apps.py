"""Each built-in app that trains and serves, installed into a fresh project and driven to ready with real parts: a
local agent runs its pipeline, the alias the pipeline sets deploys its service, and the service answers."""

from __future__ import annotations

import pytest
import requests
from django.test import Client
from django.urls import reverse

from apps.appstore.services import install
from apps.jobs.models import LogLine
from apps.jobs.services import start_run
from apps.serving.models import InferenceService
from apps.serving.tasks import follow_alias
from tests.appstore.factories import builtin_version
from tests.factories import ProjectFactory, UserFactory
from tests.jobs.conftest import drive as drive_run
from tests.jobs.conftest import train_python  # noqa: F401 (fixture: skips without `make train-env`)
from tests.serving.factories import artifact_store, fast_serving, post_json, ready_replicas  # noqa: F401 (fixtures)
from tests.serving.factories import drive as drive_service

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True, databases="__all__")]

# app → (a row of inputs, what the service must answer for it)
READY = {
    "regression": (
        [0.038076, 0.05068, 0.061696, 0.021872, -0.044223, -0.034821, -0.043401, -0.002592, 0.019907, -0.017646],
        lambda predicted: 100 < predicted[0] < 300,  # a year's progression on the data's scale (25–346)
    ),
    "anomaly-detection": ([50.0, 1.2], lambda predicted: predicted == [1]),  # a normal reading
    "automl-tabular": ([6.7, 3.0, 5.2, 2.3], lambda predicted: predicted == ["virginica"]),  # the best model, served
    # the last twelve months of the shipped series: the next one continues trend and season (about 416)
    "forecasting": (
        [398.8, 410.3, 443.1, 451.2, 438.2, 423.9, 406.0, 382.6, 382.0, 368.2, 378.1, 389.7],
        lambda predicted: 380 < predicted[0] < 460,
    ),
}


@pytest.mark.usefixtures("artifact_store", "fast_serving")
@pytest.mark.parametrize("app", sorted(READY))
def test_the_app_installs_into_a_fresh_project_and_serves(app, api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version(app), project, owner)
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")

    run = drive_run(start_run(pipeline, owner), timeout=300)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    follow_alias(model.versions.get().registered_model_id, "staging")  # what the worker does once the alias moved
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    row, expected = READY[app]
    body = {"inputs": [{"name": "input-0", "shape": [1, len(row)], "datatype": "FP64", "data": row}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", body)
    assert status == 200, answer
    predicted = next(o["data"] for o in answer["outputs"] if o["name"] == "predict")
    assert expected(predicted), predicted


@pytest.mark.usefixtures("artifact_store", "fast_serving")
def test_the_text_app_serves_a_text_model_and_its_try_it_form_is_a_text_box(api_agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version("text-classification"), project, owner)
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")

    run = drive_run(start_run(pipeline, owner), timeout=300)

    assert run.status == "succeeded", (run.reason, list(run.tasks.values("node", "status", "reason")))
    follow_alias(model.versions.get().registered_model_id, "staging")
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    texts = ["Strong winds and heavy rain tonight.", "Bake the bread in a hot oven.", "A late goal won the match."]
    body = {"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": texts}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", body)
    assert status == 200, answer
    assert next(o["data"] for o in answer["outputs"] if o["name"] == "predict") == ["weather", "cooking", "sport"]

    client = Client()
    client.force_login(owner)
    url = reverse("appstore:installation-try", kwargs={"project": "fresh", "pk": installation.pk})
    page = client.get(url).content.decode()
    assert '<textarea name="text"' in page
    answer = client.post(url, {"text": "Simmer the soup and stir in the garlic."}).content.decode()
    assert "Prediction: <strong>cooking</strong>" in answer
    assert "invalid-feedback" in client.post(url, {"text": "  "}).content.decode()  # required


def _digit_png(pixels: list[float]) -> bytes:
    """An 8×8 digit of the data (0–16, ink high) as a 64×64 PNG drawn as people draw: dark ink on white."""
    import io

    from PIL import Image

    image = Image.new("L", (8, 8))
    image.putdata([int(255 - v * 255 / 16) for v in pixels])
    out = io.BytesIO()
    image.resize((64, 64), Image.Resampling.NEAREST).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.usefixtures("artifact_store", "fast_serving", "train_python")
def test_the_digits_app_trains_a_torch_cnn_serves_it_from_the_train_environment_and_reads_an_image(api_agent):
    import csv

    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.appstore.bundle import BUILTIN_DIR

    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version("image-classification"), project, owner)
    [pipeline] = installation.objects_of("pipelines")
    [service] = installation.objects_of("services")
    [model] = installation.objects_of("models")
    assert service.framework == "pytorch"

    run = drive_run(start_run(pipeline, owner), timeout=300)

    logs = [line.text for line in LogLine.objects.filter(task__run=run).order_by("id")][-30:]
    assert run.status == "succeeded", "\n".join([run.reason, *logs])
    follow_alias(model.versions.get().registered_model_id, "staging")
    service = drive_service(service, lambda s: s.status == InferenceService.Status.READY, timeout=180)
    [replica] = ready_replicas(service.current_revision)
    metadata = requests.get(f"{replica.upstream}/v2/models/{service.name}", timeout=10).json()
    assert metadata["platform"] == "pytorch", metadata
    assert metadata["inputs"][0]["shape"] == [-1, 8, 8], metadata
    with (BUILTIN_DIR / "image-classification" / "data" / "digits.csv").open() as fh:
        rows = [[float(v) for v in row] for row in list(csv.reader(fh))[1:]]
    sample = rows[-20:]  # ten digits twice over
    body = {"inputs": [{"name": "images", "shape": [20, 8, 8], "datatype": "FP32", "data": [r[:64] for r in sample]}]}
    status, answer = post_json(f"{replica.upstream}/v2/models/{service.name}/infer", body)
    assert status == 200, answer
    predicted = next(o["data"] for o in answer["outputs"] if o["name"] == "predict")
    right = sum(p == int(r[64]) for p, r in zip(predicted, sample, strict=True))
    assert right >= 17, (predicted, [int(r[64]) for r in sample])

    client = Client()
    client.force_login(owner)
    url = reverse("appstore:installation-try", kwargs={"project": "fresh", "pk": installation.pk})
    page = client.get(url).content.decode()
    assert 'type="file" name="image"' in page
    assert 'name="pixels"' in page
    assert 'enctype="multipart/form-data"' in page
    pixels, digit = sample[0][:64], int(sample[0][64])
    answer = client.post(url, {"pixels": ", ".join(str(int(v)) for v in pixels)}).content.decode()
    assert f"Prediction: <strong>{digit}</strong>" in answer, answer
    image = SimpleUploadedFile("digit.png", _digit_png(pixels), content_type="image/png")
    answer = client.post(url, {"image": image}).content.decode()
    assert f"Prediction: <strong>{digit}</strong>" in answer, answer
    assert "invalid-feedback" in client.post(url, {}).content.decode()  # an image or the pixels
    assert "invalid-feedback" in client.post(url, {"pixels": "1, 2, 3"}).content.decode()  # 64 values
    junk = SimpleUploadedFile("digit.png", b"not an image", content_type="image/png")
    assert "invalid-feedback" in client.post(url, {"image": junk}).content.decode()
