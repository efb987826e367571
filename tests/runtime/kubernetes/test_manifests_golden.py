"""The manifests of every kind and framework, compared with reviewed golden files, and each object validated
for Kubernetes 1.29, 1.33 and 1.37. `UPDATE_GOLDEN=1 pytest …` rewrites the files (then review the diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from apps.runtime.kubernetes.manifests import build
from apps.runtime.kubernetes.validation import validate_all
from tests.runtime.kubernetes.samples import SAMPLES, sample_profile

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
VERSIONS = ("1.29", "1.33", "1.37")


def render(case: str) -> str:
    return yaml.safe_dump_all(build(SAMPLES[case](), sample_profile()), sort_keys=False, width=120)


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_the_manifests_are_the_golden_ones(case: str) -> None:
    path = GOLDEN / f"{case}.yaml"
    text = render(case)
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no golden file for {case}: run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{case} differs from {path.name}; if that is intended: UPDATE_GOLDEN=1"


def test_every_golden_file_has_a_sample() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(SAMPLES)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_every_golden_object_validates(case: str, version: str) -> None:
    objects = list(yaml.safe_load_all((GOLDEN / f"{case}.yaml").read_text()))

    validate_all(objects, version)

    assert objects, "a golden file holds at least the primary object"


def test_the_primary_object_comes_first_and_names_come_from_the_uid() -> None:
    kinds = {
        case: [obj["kind"] for obj in yaml.safe_load_all((GOLDEN / f"{case}.yaml").read_text())] for case in SAMPLES
    }

    assert kinds["job"] == ["Job"]
    assert kinds["distributed-pytorch"] == ["PyTorchJob"]
    assert kinds["distributed-volcano"] == ["Job"]
    assert kinds["distributed-ray"] == ["RayJob"]
    assert kinds["service-deployment"] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    assert kinds["service-kserve"] == ["InferenceService"]
    assert kinds["notebook"] == ["StatefulSet", "Service"]
    for case in SAMPLES:
        names = {obj["metadata"]["name"] for obj in yaml.safe_load_all((GOLDEN / f"{case}.yaml").read_text())}
        assert names == {SAMPLES[case]().uid}, case  # every sample uid is already a valid name
