"""What a retraining run receives: the policy's arguments with every placeholder of docs/retraining.md filled in
(`{version}`, `{previous}`, `{champion}`, `{champion_version}`, `{reason}`), checked on the frozen spec and by a real
run on the local agent that prints what it was given. Incremental policies may start from either champion form."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.jobs.models import LogLine
from apps.models.registry import set_alias
from apps.retraining.models import Retraining
from apps.retraining.services import start_policy, update_policy
from tests.factories import ProjectFactory, UserFactory, dataset, dataset_version
from tests.jobs.conftest import agent, drive  # noqa: F401 (the agent fixture)
from tests.retraining.factories import champion, policy, version_with

CODE = "print('version={version} previous={previous} champion={champion} pinned={champion_version} why={reason}')"


def node_args(retraining: Retraining) -> dict:
    return next(n for n in retraining.run.spec["nodes"] if n["name"] == "load")["args"]


@pytest.mark.django_db
def test_the_frozen_run_gets_every_placeholder_filled(world):
    project, alice = world.project_a, world.alice
    ds = dataset(project, alice, name="iris")
    dataset_version(ds, {"a.csv": b"x\n1\n"})
    newest = dataset_version(ds, {"a.csv": b"x\n2\n"})
    three = champion(project, alice, 0.8)
    rule = policy(project, alice, dataset=ds, mode="incremental", arguments={"load": {"code": CODE}})

    retraining = start_policy(rule, Retraining.Reason.DATA, version=newest)
    set_alias(three.registered_model, "production", version_with(project, alice, 0.9).version)  # moves after start

    assert retraining.run is not None, retraining.message
    assert node_args(retraining)["code"] == (
        "print('version=iris@2 previous=iris@1 champion=models:/iris-classifier@production "
        f"pinned=models:/iris-classifier/{three.version} why=data')"
    )


@pytest.mark.django_db
def test_without_a_champion_its_placeholders_are_empty_and_incremental_accepts_either_form(world):
    project, alice = world.project_a, world.alice
    dataset_version(dataset(project, alice, name="iris"))
    rule = policy(project, alice, arguments={"load": {"code": CODE}})

    retraining = start_policy(rule, Retraining.Reason.MANUAL)

    assert node_args(retraining)["code"] == "print('version=iris@1 previous= champion= pinned= why=manual')"
    update_policy(rule, mode="incremental", arguments={"load": {"code": "print('{champion_version}')"}})
    with pytest.raises(ValidationError) as refused:
        update_policy(rule, mode="incremental", arguments={"load": {"code": "print('{version}')"}})
    assert "arguments" in refused.value.message_dict


@pytest.mark.live
@pytest.mark.usefixtures("agent")
def test_a_real_retraining_run_prints_what_it_received():
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    ds = dataset(project, owner, name="iris")
    dataset_version(ds, {"a.csv": b"x\n1\n"})
    newest = dataset_version(ds, {"a.csv": b"x\n2\n"})
    pinned = champion(project, owner, 0.8)
    rule = policy(project, owner, dataset=ds, mode="incremental", arguments={"load": {"code": CODE}})

    retraining = start_policy(rule, Retraining.Reason.DRIFT, version=newest)
    run = drive(retraining.run, timeout=90)

    printed = list(LogLine.objects.filter(run=run, node="load").values_list("text", flat=True))
    assert run.status == "succeeded", printed
    assert (
        "version=iris@2 previous=iris@1 champion=models:/iris-classifier@production "
        f"pinned=models:/iris-classifier/{pinned.version} why=drift"
    ) in "\n".join(printed)
