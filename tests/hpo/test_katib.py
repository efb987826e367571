"""Katib compatibility: Katib's own random example (kubeflow.org/v1beta1 Experiment) imports into a study, a bad
Experiment answers every problem by its path in the Experiment (never a 500), and a study exports as an Experiment
that Katib's schema (k8s/crds/) accepts and that imports back. The stdout collector reads Katib-style
`name=value` lines, and an objective's goal completes the study."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from django.core.exceptions import ValidationError

from apps.hpo import driver, services, storage
from apps.hpo.models import Study, Trial
from apps.jobs.models import LogLine, PipelineRun, RunStatus, TaskRun
from apps.runtime.kubernetes.validation import validate
from tests.conftest import user_client
from tests.factories import ProjectFactory, UserFactory, python_template
from tests.hpo.factories import study as make_study
from tests.jobs.conftest import agent  # noqa: F401 (the fixture, for the live test)

# Katib's examples/v1beta1/hp-tuning/random.yaml, as published (the image is Katib's MXNet MNIST example).
RANDOM_EXAMPLE = """
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  namespace: kubeflow
  name: random
spec:
  objective:
    type: maximize
    goal: 0.99
    objectiveMetricName: Validation-accuracy
    additionalMetricNames:
      - Train-accuracy
  algorithm:
    algorithmName: random
  parallelTrialCount: 3
  maxTrialCount: 12
  maxFailedTrialCount: 3
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.03"
    - name: num-layers
      parameterType: int
      feasibleSpace:
        min: "2"
        max: "5"
    - name: optimizer
      parameterType: categorical
      feasibleSpace:
        list:
          - sgd
          - adam
          - ftrl
  trialTemplate:
    primaryContainerName: training-container
    trialParameters:
      - name: learningRate
        description: Learning rate for the training model
        reference: lr
      - name: numberLayers
        description: Number of training model layers
        reference: num-layers
      - name: optimizer
        description: Training model optimizer (sdg, adam or ftrl)
        reference: optimizer
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          metadata:
            annotations:
              sidecar.istio.io/inject: "false"
          spec:
            containers:
              - name: training-container
                image: docker.io/kubeflowkatib/mxnet-mnist:latest
                command:
                  - "python3"
                  - "/opt/mxnet-mnist/mnist.py"
                  - "--batch-size=64"
                  - "--lr=${trialParameters.learningRate}"
                  - "--num-layers=${trialParameters.numberLayers}"
                  - "--optimizer=${trialParameters.optimizer}"
            restartPolicy: Never
"""


def example(**changes) -> dict:
    """The example as a mapping, with `changes` applied at dotted paths (a list index is a number)."""
    doc = yaml.safe_load(RANDOM_EXAMPLE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is ...:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return doc


@pytest.fixture
def owner(db):
    return UserFactory(username="alice")


@pytest.fixture
def project(owner):
    return ProjectFactory(owner=owner, slug="project-a")


@pytest.mark.django_db
def test_katibs_random_example_imports_as_a_study(project, owner):
    study, notes = services.import_katib(project, owner, RANDOM_EXAMPLE)

    assert (study.name, study.algorithm, study.early_stopping) == ("random", "random", "none")
    assert study.objectives == [
        {"metric": "Validation-accuracy", "direction": "maximize", "strategy": "max", "goal": 0.99}
    ]
    assert (study.max_trials, study.parallel_trials, study.max_failed_trials) == (12, 3, 3)
    assert study.space == {
        "lr": {"type": "float", "low": 0.01, "high": 0.03, "log": False},
        "num_layers": {"type": "int", "low": 2, "high": 5, "log": False},
        "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "ftrl"]},
    }
    assert study.collector == {"kind": "stdout", "formats": [services.DEFAULT_STDOUT_FORMAT]}
    node = study.template["nodes"][0]
    assert node["template"] == "shell"
    assert node["args"]["script"] == (
        'python3 /opt/mxnet-mnist/mnist.py --batch-size=64 --lr="${trial.lr}" '
        '--num-layers="${trial.num_layers}" --optimizer="${trial.optimizer}"'
    )
    assert any("mxnet-mnist" in n for n in notes)  # the image is not pulled here, and it says so
    assert any("Train-accuracy" in n for n in notes)

    driver.advance_study(study.pk)
    trial = study.trials.select_related("run").first()
    script = trial.run.spec["nodes"][0]["args"]["script"]
    assert f'--num-layers="{trial.params["num_layers"]}"' in script
    assert f'--optimizer="{trial.params["optimizer"]}"' in script


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "path", "text"),
    [
        ({"spec__parameters__0__parameterType": "float"}, "spec.parameters[0].parameterType", "is not one of"),
        ({"spec__parameters__0__feasibleSpace__min": "abc"}, "spec.parameters[0].feasibleSpace.min", "not a number"),
        ({"spec__parameters__1__feasibleSpace__min": "2.5"}, "spec.parameters[1].feasibleSpace.min", "not an integer"),
        ({"spec__parameters__0__feasibleSpace__min": "0.5"}, "spec.parameters[0].feasibleSpace.max", "at least low"),
        ({"spec__parameters__0__feasibleSpace__max": ...}, "spec.parameters[0].feasibleSpace", "'max' is a required"),
        ({"spec__parameters__0__feasibleSpace__distribution": "normal"},
         "spec.parameters[0].feasibleSpace.distribution", "uniform and logUniform"),
        ({"spec__algorithm__algorithmName": "pbt"}, "spec.algorithm.algorithmName", "no equivalent"),
        ({"spec__earlyStopping": {"algorithmName": "curvefit"}}, "spec.earlyStopping.algorithmName", "medianstop"),
        ({"spec__maxTrialCount": 0}, "spec.maxTrialCount", "less than the minimum"),
        ({"spec__parallelTrialCount": "3"}, "spec.parallelTrialCount", "not of type 'integer'"),
        ({"spec__objective__type": "up"}, "spec.objective.type", "is not one of"),
        ({"spec__trialTemplate__trialParameters__0__reference": "momentum"},
         "spec.trialTemplate.trialParameters[0].reference", "Must name a parameter"),
        ({"spec__trialTemplate__trialParameters__1": ...}, "spec.trialTemplate.trialParameters",
         "${trialParameters.numberLayers} is used but not declared"),
        ({"spec__trialTemplate__primaryContainerName": "main"}, "spec.trialTemplate.primaryContainerName",
         "No container"),
        ({"spec__trialTemplate__trialSpec__spec__template__spec__containers__0__ports": "80"},
         "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].ports", "is not of type 'array'"),
        ({"spec__trialTemplate__trialSpec__spec__template__spec__containers__0__colour": "red"},
         "spec.trialTemplate.trialSpec.spec.template.spec.containers[0]", "colour"),
        ({"spec__trialTemplate__trialSpec__kind": "PyTorchJob", "spec__trialTemplate__trialSpec__apiVersion":
          "kubeflow.org/v1"}, "spec.trialTemplate.trialSpec.kind", "batch/v1 Job"),
        ({"spec__trialTemplate__configMap": {"configMapName": "x"}}, "spec.trialTemplate", "exactly one of"),
        ({"spec__trialTemplate__trialSpec": ..., "spec__trialTemplate__configMap": {"configMapName": "x"}},
         "spec.trialTemplate.configMap", "cannot be read here"),
        ({"spec__metricsCollectorSpec": {"collector": {"kind": "TensorFlowEvent"}}},
         "spec.metricsCollectorSpec.collector.kind", "StdOut"),
        ({"metadata__name": "Random_Search"}, "metadata.name", "does not match"),
        ({"spec__nasConfig": {"graphConfig": {}}}, "spec.nasConfig", "no equivalent"),
        ({"kind": "Deployment"}, "kind", "kubeflow.org/v1beta1"),
    ],
)  # fmt: skip
def test_a_bad_experiment_names_the_path_in_the_experiment(project, owner, changes, path, text):
    with pytest.raises(ValidationError) as caught:
        services.import_katib(project, owner, example(**changes))
    errors = caught.value.message_dict
    assert path in errors, errors
    assert any(text in m for m in errors[path]), errors[path]
    assert not Study.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["spec: [unclosed", "- a list", "42", ""])
def test_text_that_is_no_experiment_is_a_field_error(project, owner, text):
    with pytest.raises(ValidationError) as caught:
        services.import_katib(project, owner, text)
    assert set(caught.value.message_dict) <= {"experiment", "kind"}


@pytest.mark.django_db
def test_hyperband_medianstop_discrete_log_and_seed_map_to_their_equivalents(project, owner):
    doc = example(
        spec__algorithm={"algorithmName": "hyperband", "algorithmSettings": [
            {"name": "resource_name", "value": "num-layers"}, {"name": "r_l", "value": "9"},
            {"name": "eta", "value": 3},
        ]},
        spec__parameters__0__feasibleSpace={"min": 0.001, "max": "0.1", "distribution": "logUniform"},
        spec__parameters__2={"name": "batch", "parameterType": "discrete", "feasibleSpace": {"list": ["32", "64"]}},
    )  # fmt: skip
    doc["spec"]["trialTemplate"]["trialParameters"][2]["reference"] = "batch"
    study, notes = services.import_katib(project, owner, doc, name="hb")
    assert (study.name, study.algorithm, study.early_stopping) == ("hb", "random", "hyperband")
    assert study.early_stopping_settings == {"min_resource": 1, "max_resource": 9, "reduction_factor": 3}
    assert study.space["num_layers"] == {"type": "categorical", "choices": [9]}  # the full resource
    assert study.space["lr"]["log"] is True
    assert study.space["batch"] == {"type": "categorical", "choices": [32, 64]}
    assert any("Hyperband" in n for n in notes)

    tpe = example(spec__algorithm={"algorithmName": "tpe", "algorithmSettings": [
        {"name": "random_state", "value": "7"}, {"name": "n_EI_candidates", "value": "24"}]},
        spec__earlyStopping={"algorithmName": "medianstop", "algorithmSettings": [
            {"name": "min_trials_required", "value": "2"}]})  # fmt: skip
    study, notes = services.import_katib(project, owner, tpe, name="tpe")
    assert (study.algorithm, study.seed, study.early_stopping) == ("tpe", 7, "median")
    assert study.early_stopping_settings == {"n_startup_trials": 2, "n_warmup_steps": 4}  # Katib's start_step
    assert any("n_EI_candidates" in n for n in notes)


@pytest.mark.django_db
def test_a_study_exports_as_an_experiment_katib_accepts_and_it_imports_back(project, owner):
    python_template()
    study = make_study(project, owner, early_stopping={"algorithm": "median", "n_startup_trials": 2})
    experiment, notes = services.export_katib(study)

    validate(experiment)  # k8s/crds/kubeflow.org_v1beta1_experiment.json, the Job against Kubernetes' own
    spec = experiment["spec"]
    assert spec["algorithm"] == {"algorithmName": "tpe", "algorithmSettings": [{"name": "random_state", "value": "1"}]}
    assert spec["earlyStopping"]["algorithmName"] == "medianstop"
    assert [p["name"] for p in spec["parameters"]] == ["C", "solver", "l1_ratio"]
    assert spec["parameters"][0] == {
        "name": "C", "parameterType": "double",
        "feasibleSpace": {"min": "0.001", "max": "10.0", "distribution": "logUniform"},
    }  # fmt: skip
    container = spec["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["python", "-c"]
    assert "${trialParameters.C}" in container["command"][-1]
    assert {p["reference"] for p in spec["trialTemplate"]["trialParameters"]} == {"C", "solver", "l1_ratio"}
    assert any("conditional" in n for n in notes)
    assert any("stdout" in n for n in notes)

    back, _notes = services.import_katib(project, owner, yaml.safe_dump(experiment), name="back")
    assert back.space["C"] == {"type": "float", "low": 0.001, "high": 10.0, "log": True}
    assert back.early_stopping == "median"


@pytest.mark.django_db
def test_what_katib_cannot_express_is_refused_on_export(project, owner):
    python_template()
    two = [{"metric": "acc", "direction": "maximize"}, {"metric": "latency", "direction": "minimize"}]
    with pytest.raises(ValidationError) as caught:
        services.export_katib(make_study(project, owner, objectives=two, algorithm="nsga2"))
    assert "algorithm" in caught.value.message_dict
    spec = {"nodes": [{"name": "a", "template": "py", "args": {"code": "print(${trial.C})"}},
                      {"name": "b", "template": "py", "args": {"code": "pass"}, "depends_on": ["a"]}]}  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        services.export_katib(make_study(project, owner, name="two-nodes", trial_template={"spec": spec}))
    assert "one node" in caught.value.message_dict["trial_template"][0]


def _print(trial: Trial, *lines: str) -> None:
    """What the trial's task prints; its run is running then (the orchestrator says so once a task started)."""
    PipelineRun.objects.filter(pk=trial.run_id, status="queued").update(status="running")
    task = trial.run.tasks.first() or TaskRun.objects.create(run=trial.run, node="trial")
    for seq, text in enumerate(lines, start=LogLine.objects.filter(task=task).count() + 1):
        LogLine.objects.create(run=trial.run, task=task, node=task.node, attempt=1, seq=seq,
                               ts=datetime.now(UTC), text=text)  # fmt: skip


@pytest.mark.django_db
def test_the_stdout_collector_reads_name_value_lines_and_the_goal_completes_the_study(project, owner):
    study, _notes = services.import_katib(project, owner, example(spec__objective__goal=0.95))
    driver.advance_study(study.pk)
    first, second, _third = study.trials.select_related("run").order_by("number")
    _print(first, "epoch 1", "Validation-accuracy=0.61", "Train-accuracy=0.7", "Validation-accuracy = 0.93")
    _print(second, "loss=0.9 Train-accuracy=0.52")
    driver.advance_study(study.pk)
    first.refresh_from_db()
    assert first.intermediate == {"1": 0.61, "2": 0.93}  # each printed value is a step, as Katib counts them
    for trial, extra in ((first, "Validation-accuracy=0.8"), (second, "no metric here")):
        _print(trial, extra)
        trial.run.status = RunStatus.SUCCEEDED
        trial.run.save()
    study = driver.advance_study(study.pk)
    first.refresh_from_db()
    assert (first.status, first.values) == ("complete", [0.93])  # Katib's default strategy for maximize: max
    assert study.trials.get(number=1).reason == "The run printed no line “Validation-accuracy=…”."
    assert study.status == "running"

    third = study.trials.select_related("run").filter(status="running").first()
    _print(third, "Validation-accuracy=0.97")
    third.run.status = RunStatus.SUCCEEDED
    third.run.save()
    study = driver.advance_study(study.pk)
    assert (study.status, study.reason) == ("completed", f"The goal (0.95) was reached by trial #{third.number}.")
    assert storage.load(study).best_value == 0.97


def test_the_api_imports_and_exports_and_other_tenants_get_404(world):
    bob = user_client(world.bob)
    response = bob.post("/api/v1/studies/katib/", {"project": "project-a", "experiment": RANDOM_EXAMPLE},
                        format="json")  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["study"]["name"] == "random"
    assert body["notes"]
    pk = body["study"]["id"]

    bad = bob.post("/api/v1/studies/katib/", {"project": "project-a", "experiment": example(
        spec__parameters__0__feasibleSpace__min="x", spec__algorithm__algorithmName="pbt", metadata__name="other")},
        format="json")  # fmt: skip
    assert bad.status_code == 400
    assert set(bad.json()) >= {"spec.parameters[0].feasibleSpace.min", "spec.algorithm.algorithmName"}
    assert bob.post("/api/v1/studies/katib/", {"project": "project-a", "experiment": "a: [b"},
                    format="json").status_code == 400  # fmt: skip
    duplicate = bob.post("/api/v1/studies/katib/", {"project": "project-a", "experiment": RANDOM_EXAMPLE},
                         format="json")  # fmt: skip
    assert duplicate.status_code == 400
    assert "metadata.name" in duplicate.json()

    exported = bob.get(f"/api/v1/studies/{pk}/katib/")
    assert exported.status_code == 200
    experiment = exported.json()["experiment"]
    validate(experiment)
    assert yaml.safe_load(exported.json()["yaml"]) == experiment
    assert experiment["spec"]["metricsCollectorSpec"]["collector"] == {"kind": "StdOut"}

    charlie = user_client(world.charlie)
    assert charlie.get(f"/api/v1/studies/{pk}/katib/").status_code == 404
    refused = charlie.post("/api/v1/studies/katib/", {"project": "project-a", "experiment": RANDOM_EXAMPLE},
                           format="json")  # fmt: skip
    assert refused.status_code in (400, 404)
    assert "project" in refused.json() or refused.status_code == 404


def test_the_import_page_takes_a_katib_experiment_and_the_study_page_exports_it(client, world):
    client.force_login(world.alice)
    response = client.post("/p/project-a/studies/import/", {"document": RANDOM_EXAMPLE})
    study = Study.objects.get(name="random")
    assert response.status_code == 302
    page = client.get(response["Location"])
    assert "mxnet-mnist" in page.content.decode()  # the notes, as messages
    exported = client.get(f"/p/project-a/studies/{study.pk}/katib.yaml")
    assert exported.status_code == 200
    assert yaml.safe_load(exported.content)["kind"] == "Experiment"

    bad = client.post("/p/project-a/studies/import/", {"document": yaml.safe_dump(
        example(spec__parameters__0__parameterType="float", metadata__name="other"))})  # fmt: skip
    assert bad.status_code == 400
    assert any("spec.parameters[0].parameterType" in e for e in bad.context["form"].non_field_errors())

    client.force_login(world.charlie)
    assert client.get(f"/p/project-a/studies/{study.pk}/katib.yaml").status_code == 404


def test_katibs_example_passes_the_schema_as_it_is():
    validate(example())  # what Katib's API server takes, the portal's schema takes


# The example made runnable here: the same parameters, placeholders and stdout lines, a stand-in for MXNet MNIST.
TRAIN = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int)
p.add_argument("--lr", type=float)
p.add_argument("--num-layers", type=int)
p.add_argument("--optimizer", choices=["sgd", "adam", "ftrl"])
a = p.parse_args()
bonus = {"sgd": 0.0, "adam": 0.03, "ftrl": 0.01}[a.optimizer]
for epoch in range(1, 4):
    accuracy = 0.5 + 0.1 * epoch + 2 * a.lr + 0.01 * a.num_layers + bonus
    print(f"Epoch[{epoch}] Train-accuracy={accuracy + 0.01:.4f}")
    print(f"Epoch[{epoch}] Validation-accuracy={accuracy:.4f}", flush=True)
"""


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_katibs_example_imports_and_its_trials_run_green(agent, project, owner):  # noqa: F811
    from apps.jobs.builtin import load_builtin_templates
    from tests.hpo.conftest import drive_study

    load_builtin_templates()
    experiment = example(spec__maxTrialCount=4, spec__parallelTrialCount=2)
    container = experiment["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    container["command"][1:2] = ["-c", TRAIN]
    study, _notes = services.import_katib(project, owner, experiment)

    study = drive_study(study)

    trials = list(study.trials.select_related("run").order_by("number"))
    assert study.status == Study.Status.COMPLETED, (study.reason, [(t.number, t.status, t.reason) for t in trials])
    assert [(t.number, t.status, t.run.status) for t in trials] == [(n, "complete", "succeeded") for n in range(4)]
    for trial in trials:
        p = trial.params
        expected = 0.8 + 2 * p["lr"] + 0.01 * p["num_layers"] + {"sgd": 0.0, "adam": 0.03, "ftrl": 0.01}[p["optimizer"]]
        assert trial.values == [pytest.approx(expected, abs=1e-4)]  # the best epoch's (Katib's "max" strategy)
        assert sorted(trial.intermediate) == ["1", "2", "3"]
    assert study.best_trials()[0].value == max(t.value for t in trials)
