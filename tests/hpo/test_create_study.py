"""create_study: every field of a study's definition is checked, errors keyed by the field; a valid one makes the
study, its Optuna study and queues the driver."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from apps.hpo import services, storage
from apps.hpo.models import Study
from apps.projects.models import Role
from tests.factories import ProjectFactory, UserFactory, add_member, pipeline
from tests.hpo.factories import study, study_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return UserFactory(username="alice")


@pytest.fixture
def project(owner):
    return ProjectFactory(owner=owner, slug="project-a")


def errors_of(project, **overrides) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        services.create_study(project, None, study_document(**overrides))
    assert not Study.objects.exists()  # nothing half-written
    return caught.value.message_dict


def test_it_makes_the_study_and_its_optuna_study(project, owner):
    made = study(project, owner)
    assert (made.name, made.algorithm, made.max_trials, made.parallel_trials) == ("tune", "tpe", 4, 2)
    assert list(made.space) == ["C", "solver", "l1_ratio"]  # parents before their conditional children
    assert made.template == {"nodes": [{"name": "trial", "template": "py", "args": made.template["nodes"][0]["args"]}]}
    assert storage.load(made).directions[0].name == "MAXIMIZE"


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"name": "Bad Name"}, "name", "lowercase"),
        ({"objectives": []}, "objectives", "at least one objective"),
        ({"objectives": [{"metric": "acc", "direction": "up"}]}, "objectives.0.direction", "minimize or maximize"),
        ({"objectives": [{"metric": ""}]}, "objectives.0.metric", "name of a metric"),
        ({"space": {}}, "space", "at least one parameter"),
        ({"space": {"C": {"type": "float", "low": 1, "high": 0.5}}}, "space.C.high", "at least low"),
        ({"space": {"C": {"type": "float", "low": 0, "high": 1, "log": True}}}, "space.C.low", "log-scale"),
        ({"space": {"C": {"type": "float", "low": "a", "high": 1}}}, "space.C.low", "number"),
        ({"space": {"n": {"type": "int", "low": 1.5, "high": 4}}}, "space.n.low", "integer"),
        ({"space": {"n": {"type": "int", "low": 1, "high": 4, "step": 0}}}, "space.n.step", "positive"),
        ({"space": {"k": {"type": "categorical", "choices": []}}}, "space.k.choices", "non-empty"),
        ({"space": {"k": {"type": "tree"}}}, "space.k.type", "Must be one of"),
        ({"space": {"k": {"type": "int", "low": 1, "high": 2, "max": 3}}}, "space.k", "Unknown keys: max"),
        (
            {"space": {"C": {"type": "float", "low": 0.1, "high": 1, "condition": {"param": "zz", "in": ["a"]}}}},
            "space.C.condition.param", "another categorical parameter",
        ),
        ({"algorithm": "annealing"}, "algorithm", "Must be one of"),
        ({"algorithm": "grid"}, "algorithm", "conditional"),
        ({"early_stopping": {"algorithm": "median", "patience": 3}}, "early_stopping.patience", "Not a setting"),
        ({"early_stopping": "sometimes"}, "early_stopping.algorithm", "Must be one of"),
        ({"budget": {"max_trials": 0}}, "budget.max_trials", "from 1 to"),
        ({"budget": {"max_trials": 2, "parallel_trials": 3}}, "budget.parallel_trials", "max_trials"),
        ({"budget": {"deadline": "2001-01-01T00:00:00Z"}}, "budget.deadline", "future"),
        ({"budget": {"deadline": "soon"}}, "budget.deadline", "ISO 8601"),
        ({"seed": -1}, "seed", "integer"),
        ({"trial_template": {}}, "trial_template", "Name one of"),
        ({"trial_template": {"pipeline": "nope"}}, "trial_template.pipeline", "No pipeline"),
        ({"trial_template": {"job_template": "py", "args": {"code": "${trial.gamma}"}}}, "trial_template", "gamma"),
        ({"colour": "blue"}, "colour", "Unknown setting"),
        ({"objectives": [{"metric": "acc", "strategy": "mean"}]}, "objectives.0.strategy", "latest, min, max"),
        ({"objectives": [{"metric": "acc", "goal": "high"}]}, "objectives.0.goal", "a number"),
        ({"objectives": [{"metric": "acc", "goal": 1}, {"metric": "b"}]}, "objectives.0.goal", "single objective"),
        ({"objectives": [{"metric": "acc", "weight": 2}]}, "objectives.0.weight", "Unknown setting"),
        ({"metrics_collector": "file"}, "metrics_collector.kind", "tracking, stdout"),
        ({"metrics_collector": {"kind": "stdout", "formats": ["(a"]}}, "metrics_collector.formats.0", "regular"),
        ({"metrics_collector": {"kind": "stdout", "formats": ["(\\w+)=.*"]}}, "metrics_collector.formats.0",
         "two groups"),
    ],
)  # fmt: skip
def test_it_names_the_bad_field(project, overrides, field, text):
    errors = errors_of(project, **overrides)
    assert field in errors, errors
    assert any(text in message for message in errors[field]), errors[field]


def test_the_template_is_checked_with_the_trial_values_filled_in(project):
    """An argument the template's schema refuses (code must be text, not a number) is the template's error."""
    errors = errors_of(project, trial_template={"job_template": "py", "args": {"code": "${trial.C}"}})
    assert any(key.startswith("trial_template.") for key in errors), errors


def test_several_objectives_need_a_multi_objective_algorithm_and_no_pruner(project, owner):
    two = [{"metric": "acc", "direction": "maximize"}, {"metric": "latency", "direction": "minimize"}]
    errors = errors_of(project, objectives=two, algorithm="cmaes", early_stopping="median")
    assert "algorithm" in errors
    assert "early_stopping" in errors
    made = study(project, owner, objectives=two, algorithm="nsga2")
    assert made.is_multi_objective


def test_a_grid_needs_steps_and_counts_its_points(project):
    space = {"C": {"type": "float", "low": 0.1, "high": 1.0}}
    errors = errors_of(project, algorithm="grid", space=space, trial_template={"job_template": "py",
                       "args": {"code": "print(${trial.C})"}})  # fmt: skip
    assert "step" in errors["algorithm"][0]


def test_a_pipeline_template_takes_the_pipeline_with_arguments_replaced(project, owner):
    saved = pipeline(project, owner, [{"name": "train", "args": {"code": "print(1)"}}], name="train")
    made = study(project, owner, trial_template={"pipeline": "train", "args": {"train": {"code": "print(${trial.C})"}}})
    assert made.pipeline == saved
    assert made.template["nodes"][0]["args"]["code"] == "print(${trial.C})"
    assert saved.spec["nodes"][0]["args"]["code"] == "print(1)"  # the pipeline itself is unchanged


def test_the_name_is_unique_in_the_project(project, owner):
    study(project, owner)
    with pytest.raises(ValidationError) as caught:
        study(project, owner)
    assert "name" in caught.value.message_dict


def test_a_viewer_cannot_start_a_study(project):
    viewer = UserFactory(username="bob")
    add_member(project, viewer, Role.VIEWER)
    with pytest.raises(PermissionDenied):
        services.create_study(project, viewer, study_document())
