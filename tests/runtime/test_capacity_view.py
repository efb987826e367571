"""The capacity page: the live local agents' CPU, memory and GPUs and the clusters' inventories, with who holds
what. Platform admins see every holder; a member sees their own projects' holders and the rest only as a total,
never another project's name, user or workload; anonymous visitors log in first."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.jobs.models import RunStatus, TaskStatus
from apps.notebooks.models import Notebook
from tests.factories import UserFactory
from tests.projects.factories import (
    NotebookFactory,
    PipelineRunFactory,
    ServiceFactory,
    TaskRunFactory,
    agent,
    dead_agent,
    notebook_workload,
    replica,
    replica_workload,
    task_workload,
)
from tests.runtime.factories import ClusterFactory, bind, node, set_inventory

URL = "/capacity/"


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page(user):
    response = client_for(user).get(URL)
    assert response.status_code == 200
    return response, response.content.decode()


@pytest.fixture
def busy(world):
    """One machine with 32 cores, 128 GiB and 2 GPUs: project A runs a task (alice) and a notebook (bob); project
    B (charlie) serves a model on a GPU and has a task no agent took yet."""
    machine = agent(hostname="gpu-box-1", cpu=32, memory_bytes=128 * 2**30, gpus=2)
    run = PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.RUNNING, number=7)
    task = TaskRunFactory(run=run, node="train", status=TaskStatus.RUNNING)
    task_workload(task, on=machine, cpu=4, memory=16 * 2**30, gpu=0, replicas={"master": 1, "worker": 1})
    nb = NotebookFactory(project=world.project_a, owner=world.bob, name="eda", status=Notebook.Status.RUNNING)
    notebook_workload(nb, on=machine)
    service = ServiceFactory(project=world.project_b, name="secret-api", created_by=world.charlie)
    replica_workload(replica(service, user=world.charlie), on=machine, cpu=2, memory=4 * 2**30, gpu=1)
    theirs = PipelineRunFactory(project=world.project_b, created_by=world.charlie, status=RunStatus.QUEUED)
    task_workload(TaskRunFactory(run=theirs, node="hidden-node", status=TaskStatus.QUEUED), cpu=1, memory=2**30)
    return machine


def test_staff_see_every_holder_with_project_and_user(world, busy):
    admin = UserFactory(username="root", is_staff=True)

    response, html = page(admin)

    capacity = response.context["capacity"]
    assert capacity.show_all
    [machine] = capacity.machines
    # distributed: 2 replicas × 4 CPU; the notebook's 0.5; the replica's 2
    assert (machine.used.cpu, machine.used.gpu, machine.used.workloads) == (10.5, 1.0, 3)
    assert [(m.label, m.used, m.limit, m.percent) for m in machine.meters] == [
        ("CPU cores", 10.5, 32.0, 33),
        ("Memory", 36.5 * 2**30, 128.0 * 2**30, 29),
        ("GPUs", 1.0, 2.0, 50),
    ]
    holders = {(h.kind, h.what, h.project_slug, h.user) for h in machine.holders}
    assert holders == {
        ("task", "train #7 · train", "project-a", "alice"),
        ("notebook", "eda", "project-a", "bob"),
        ("service", "secret-api r1 #0", "project-b", "charlie"),
    }
    [waiting] = capacity.unclaimed
    assert (waiting.kind, waiting.what.endswith(" · hidden-node"), waiting.state) == ("task", True, "pending")
    assert (waiting.project_slug, waiting.user) == ("project-b", "charlie")
    assert "gpu-box-1" in html
    assert "0: NVIDIA H100" in html
    assert "1: NVIDIA H100" in html
    assert "Waiting for an agent" in html
    assert 'href="/p/project-b/services/' in html
    assert "Other projects" not in html


def test_a_member_sees_their_projects_holders_and_the_rest_as_a_total(world, busy):
    response, html = page(world.bob)

    capacity = response.context["capacity"]
    assert not capacity.show_all
    [machine] = capacity.machines
    assert (machine.used.cpu, machine.used.workloads) == (10.5, 3)  # the machine's numbers are the whole machine's
    assert {h.project_slug for h in machine.holders} == {"project-a"}
    assert (machine.others.workloads, machine.others.cpu, machine.others.gpu) == (1, 2.0, 1.0)
    assert "Other projects: 1 workload holding 2 CPU, 4.0\xa0GB, 1 GPUs." in html
    assert capacity.unclaimed == []
    assert capacity.unclaimed_others.workloads == 1
    assert "eda" in html
    assert "alice" in html  # a colleague in project A
    for hidden in ("secret-api", "charlie", "Project B", "project-b", "hidden-node", "gpu-box-1"):
        assert hidden not in html


def test_someone_without_projects_sees_only_totals(world, busy):
    response, html = page(UserFactory(username="newcomer"))

    [machine] = response.context["capacity"].machines
    assert machine.holders == []
    assert machine.others.workloads == 3
    assert "Other projects: 3 workloads" in html
    assert "None of your projects runs on a cluster." in html
    for hidden in ("eda", "alice", "bob", "charlie", "secret-api", "train #7"):
        assert hidden not in html


def test_dead_agents_and_their_workloads_are_left_out(world):
    gone = dead_agent(hostname="old-box")
    run = PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING)
    task_workload(TaskRunFactory(run=run, status=TaskStatus.RUNNING), on=gone)
    admin = UserFactory(username="root", is_staff=True)

    response, html = page(admin)

    assert response.context["capacity"].machines == []
    assert "No agent runs on this machine" in html
    assert "old-box" not in html
    assert "No cluster is registered." in html
    assert 'href="/clusters/new/"' in html


def test_clusters_show_their_inventory_and_the_portals_workloads_to_whom_may_see_them(world):
    lab = ClusterFactory(name="lab")
    set_inventory(
        lab,
        [
            node("n1", gpu_type="A100", cpu=(64, 16), memory=(256 * 2**30, 64 * 2**30), gpu=(8, 2)),
            node("n2", cpu=(32, 8)),
        ],
    )
    ClusterFactory(name="other-lab")
    bind(lab, world.project_a)
    run = PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.RUNNING, number=3)
    task_workload(TaskRunFactory(run=run, node="fit", status=TaskStatus.RUNNING), cluster=lab, cpu=8, gpu=2)
    service = ServiceFactory(project=world.project_b, name="secret-api")
    replica_workload(replica(service), cluster=lab, cpu=1, gpu=0)

    response, html = page(world.alice)

    [use] = response.context["capacity"].clusters
    assert use.cluster.name == "lab"
    assert [(m.label, m.used, m.limit) for m in use.meters] == [
        ("CPU cores", 24.0, 96.0),
        ("Memory", 68.0 * 2**30, 288.0 * 2**30),
        ("GPUs", 2.0, 8.0),
    ]
    assert [(h.what, h.user) for h in use.holders] == [("train #3 · fit", "alice")]
    assert use.others.workloads == 1
    assert "A100: 2 / 8" in html
    assert "other-lab" not in html
    assert "secret-api" not in html

    response, html = page(UserFactory(username="root", is_staff=True))
    names = [u.cluster.name for u in response.context["capacity"].clusters]
    assert names == ["lab", "other-lab"]
    assert "secret-api r1 #0" in html
    assert "not read yet" in html  # other-lab's controller never wrote an inventory


def test_the_page_asks_anonymous_visitors_to_log_in(db, client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_nav_links_to_it(world):
    _response, html = page(world.bob)
    assert f'href="{URL}"' in html


def test_its_queries_do_not_grow_with_workloads(world, busy, django_assert_max_num_queries):
    admin = client_for(UserFactory(username="root", is_staff=True))
    admin.get(URL)
    with django_assert_max_num_queries(20) as few:
        admin.get(URL)
    for i in range(30):
        run = PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.RUNNING)
        task_workload(TaskRunFactory(run=run, node=f"n{i}", status=TaskStatus.RUNNING), on=busy)
        nb = NotebookFactory(project=world.project_b, owner=world.charlie, status=Notebook.Status.RUNNING)
        notebook_workload(nb, on=busy)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = admin.get(URL)
    assert len(response.context["capacity"].machines[0].holders) == 63
