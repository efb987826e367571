"""A study of a project that runs on Kubernetes: its trials go through the same runtime interface as any run (Jobs on
the project's cluster, the in-test API server), with the trial's values in the pod's arguments; pods that fail fail
their trials, which are replaced until the study's failure budget is spent."""

from __future__ import annotations

import pytest

from apps.hpo import services
from apps.hpo.models import Study
from tests.factories import ProjectFactory, UserFactory, python_template
from tests.hpo.conftest import drive_study
from tests.runtime.factories import bind
from tests.runtime.kubernetes.conftest import cluster, fake, kube_worker, run_controller  # noqa: F401 (fixtures)
from tests.runtime.kubernetes.test_pipeline_on_cluster import wait_for_inventory

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # the driver publishes events


def test_trials_run_as_jobs_on_the_projects_cluster(cluster, fake, run_controller):  # noqa: F811
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="vision")
    project.runtime = "kubernetes"
    project.save(update_fields=["runtime"])
    bind(cluster, project, namespace="vision", is_default=True)
    fake.add_node("node-1", cpu="16", memory="64Gi")
    run_controller()
    wait_for_inventory(cluster)
    fake.sim.autopilot(outcome="failed", lines=1, delay=0.02)
    python_template()
    study = services.create_study(project, owner, {
        "name": "on-cluster",
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"}],
        "space": {"C": {"type": "float", "low": 0.1, "high": 1.0}},
        "algorithm": "random",
        "budget": {"max_trials": 4, "parallel_trials": 2, "max_failed_trials": 1},
        "trial_template": {"job_template": "py", "args": {"code": "print('C is ${trial.C}')"}},
    })  # fmt: skip

    study = drive_study(study, timeout=120)

    assert (study.status, study.reason) == (Study.Status.FAILED, "2 trials failed (at most 1 may).")
    trials = list(study.trials.select_related("run"))
    assert {t.status for t in trials} == {"failed"}
    jobs = fake.objects("batch", "jobs", "vision")
    containers = [job["spec"]["template"]["spec"]["containers"][0] for job in jobs]
    args = [" ".join(c.get("command", []) + c.get("args", [])) for c in containers]
    # The trials whose pods failed (a third one may have been cancelled by the study's end, with or without a Job).
    failed_on_cluster = [t for t in trials if not t.reason.startswith("Stopped with the study")]
    assert len(failed_on_cluster) == 2
    assert len(jobs) >= 2
    for trial in failed_on_cluster:
        assert trial.run.tasks.get().runtime == "kubernetes"
        assert sum(f"C is {trial.params['C']}" in a for a in args) == 1, args
