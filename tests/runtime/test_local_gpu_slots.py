"""The local runtime gives each replica GPUs of its own (apps/runtime/local/gpu.py `GpuSlots`): a task that asks
for N GPUs gets N that no running replica holds, named in its CUDA_VISIBLE_DEVICES, and they come back when it ends.
The agent runs real processes on a machine whose `nvidia-smi` (a script on PATH) reports two GPUs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from apps.runtime.local.agent import LocalAgent, Supervised, Supervisor
from apps.runtime.local.gpu import GpuSlots, NoFreeGpu, with_devices
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import Workload
from portal.lib.resources import Resources

SMI = """#!/bin/sh
case "$1" in
  --query-gpu=index,name,memory.total*) printf '0, NVIDIA H200, 143771\\n1, NVIDIA H200, 143771\\n';;
  --query-gpu=*) printf '0, GPU-00000000-0000-4000-8000-000000000000, 0\\n'
                 printf '1, GPU-11111111-1111-4111-8111-111111111111, 0\\n';;
  *) ;;
esac
"""


def test_slots_hand_out_free_gpus_and_take_them_back():
    slots = GpuSlots([0, 1, 2])
    assert slots.take(1) == [0]
    assert slots.take(2) == [1, 2]
    with pytest.raises(NoFreeGpu, match=r"needs 1 GPU.*0 of this machine's 3 are free"):
        slots.take(0.5)  # a share of a GPU holds a whole one here
    slots.give([1])
    assert slots.take(1) == [1]


def test_the_replica_env_names_exactly_its_gpus_whatever_the_workload_said():
    env = with_devices({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "PATH": "/bin"}, [2])
    assert env == {"CUDA_VISIBLE_DEVICES": "2", "NVIDIA_VISIBLE_DEVICES": "2", "PATH": "/bin"}


@pytest.fixture
def two_gpu_agent(tmp_path, monkeypatch, settings):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings.PORTAL_LOCAL_SANDBOX = "off"  # plain processes: what is checked is their env
    agent = LocalAgent(max_workloads=2)
    yield agent
    agent.gpu.close()
    agent.notifier.stop(timeout=10)
    agent.pool.shutdown(wait=False)
    agent.sock.close()


def printing_devices(tmp_path: Path, uid: str, gpu: float, **fields) -> Workload:
    out = tmp_path / f"{uid}.txt"
    return Workload(
        name=uid, uid=uid, project="project-a", workdir=str(tmp_path), resources=Resources(gpu=gpu),
        env={"CUDA_VISIBLE_DEVICES": "0,1"},  # what a template might say: the runtime decides
        command=["/bin/sh", "-c", f'echo "$CUDA_VISIBLE_DEVICES" >> {out}'], **fields,
    )  # fmt: skip


def run_here(agent: LocalAgent, workload: Workload) -> LocalWorkload:
    row = LocalWorkload.objects.create(uid=workload.uid, spec=workload.as_dict(), agent=agent.agent)
    Supervisor(agent, Supervised(row.pk, Workload.from_dict(row.spec))).run()
    return row


@pytest.mark.django_db(transaction=True)
def test_tasks_get_gpus_no_running_task_holds_and_give_them_back(two_gpu_agent, tmp_path):
    assert two_gpu_agent.capacity["gpu"] == 2
    held = two_gpu_agent.gpus.take(1)  # a task of another project runs on GPU 0
    run_here(two_gpu_agent, printing_devices(tmp_path, "one", gpu=1))
    assert (tmp_path / "one.txt").read_text().split() == ["1"]
    two_gpu_agent.gpus.give(held)
    run_here(two_gpu_agent, printing_devices(tmp_path, "two", gpu=2))
    assert (tmp_path / "two.txt").read_text().split() == ["0,1"]  # both free again once "one" ended
    assert two_gpu_agent.gpus.free == {0, 1}


@pytest.mark.django_db(transaction=True)
def test_each_replica_of_a_distributed_task_gets_its_own_gpu(two_gpu_agent, tmp_path):
    workload = printing_devices(tmp_path, "ddp", gpu=1, kind="distributed", replicas={"worker": 2})
    run_here(two_gpu_agent, workload)
    assert sorted((tmp_path / "ddp.txt").read_text().split()) == ["0", "1"]


@pytest.mark.django_db(transaction=True)
def test_a_task_asking_for_more_gpus_than_are_free_fails_with_the_reason(two_gpu_agent, tmp_path):
    held = two_gpu_agent.gpus.take(1)
    row = run_here(two_gpu_agent, printing_devices(tmp_path, "big", gpu=2))
    two_gpu_agent.notifier.stop(timeout=10)  # the end is recorded by the notifier thread
    row.refresh_from_db()
    assert row.state == LocalWorkload.State.FAILED
    assert "needs 2 GPU(s) per replica; 1 of this machine's 2 are free" in row.reason
    assert not (tmp_path / "big.txt").exists()
    assert two_gpu_agent.gpus.free == {1}  # nothing it took is lost
    two_gpu_agent.gpus.give(held)
