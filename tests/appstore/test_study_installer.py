"""The `studies` section of a bundle: a study made through apps.hpo's service, its field errors keyed by the manifest
entry, and nothing left (not even the Optuna study) when the install fails after it."""

from __future__ import annotations

import optuna
import pytest
from django.core.exceptions import ValidationError

from apps.appstore.models import Installation
from apps.appstore.services import add_version, install, uninstall
from apps.hpo import storage
from apps.hpo.models import Study
from apps.jobs.models import Pipeline
from apps.serving.models import InferenceService
from tests.appstore.factories import tiny_bundle

pytestmark = pytest.mark.django_db


def study(**overrides):
    entry = {
        "name": "{{ install }}-tune",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "space": {"C": {"type": "float", "low": 0.001, "high": 10.0, "log": True}},
        "budget": {"max_trials": 4, "parallel_trials": 2},
        "trial_template": {"job_template": "python", "args": {"code": "print(${trial.C})"}},
    }
    return {**entry, **overrides}


def optuna_names() -> set[str]:
    return set(optuna.get_all_study_names(storage.get_storage()))


def test_a_bundle_installs_its_study_and_uninstall_removes_it(world):
    installation = install(add_version(tiny_bundle(studies=[study()])), world.project_a, world.alice, name="t")

    [made] = installation.objects_of("studies")
    assert (made.name, made.project, made.status, made.max_trials) == ("t-tune", world.project_a, "running", 4)
    assert made.template["nodes"][0]["args"]["code"] == "print(${trial.C})"
    assert made.optuna_name in optuna_names()

    uninstall(installation)

    assert not Study.objects.exists()


def test_a_bad_study_is_a_field_error_of_its_entry_and_nothing_is_made(world):
    bad = study(space={"C": {"type": "float", "low": 5, "high": 1}})

    with pytest.raises(ValidationError) as caught:
        install(add_version(tiny_bundle(studies=[bad])), world.project_a, world.alice)

    assert list(caught.value.message_dict) == ["spec.studies[0].space.C.high"]
    assert not Installation.objects.exists()
    assert not Study.objects.exists()
    assert not Pipeline.objects.exists()


def test_an_install_failing_after_its_study_removes_the_optuna_study_too(world):
    InferenceService.objects.create(project=world.project_a, name="taken")
    before = optuna_names()
    version = add_version(
        tiny_bundle(studies=[study()], models=[{"name": "m"}], services=[{"name": "taken", "model": "m"}])
    )

    with pytest.raises(ValidationError) as caught:
        install(version, world.project_a, world.alice)

    assert "spec.services[0].name" in caught.value.message_dict
    assert not Study.objects.exists()
    assert optuna_names() == before
