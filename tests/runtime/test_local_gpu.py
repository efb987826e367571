"""GPU samples of local workloads (apps/runtime/local/gpu.py), from nvidia-smi output recorded on a machine with three
GPUs: its CSV is parsed, each replica gets the GPU memory of its own processes and the utilisation of the GPUs it is
on, and a machine without GPUs (or whose nvidia-smi fails) gives nulls, never an error. The probe runs a real
`nvidia-smi` program found on PATH: here a script that prints the recorded output."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest

from apps.runtime.local.gpu import GpuProbe, GpuReading, attribute, parse_apps, parse_gpus, visible_devices

MiB = 2**20
# nvidia-smi --query-gpu=index,uuid,utilization.gpu --format=csv,noheader,nounits
GPUS = """\
0, GPU-5f2e1c4a-8d7b-4e0f-9a31-2c6b7d8e9f01, 87
1, GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d, 3
2, GPU-0badc0de-1234-4567-89ab-cdef01234567, [N/A]
"""
# nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits
APPS = """\
41230, GPU-5f2e1c4a-8d7b-4e0f-9a31-2c6b7d8e9f01, 30512
41231, GPU-5f2e1c4a-8d7b-4e0f-9a31-2c6b7d8e9f01, 1024
41231, GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d, 512
50001, GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d, [N/A]
60001, GPU-ffffffff-0000-4000-8000-000000000000, 100
"""


def reading() -> GpuReading:
    utilisation, uuids = parse_gpus(GPUS)
    return GpuReading(utilisation, parse_apps(APPS, uuids))


def test_the_recorded_output_parses_into_utilisation_and_each_process_memory_per_gpu():
    utilisation, uuids = parse_gpus(GPUS)
    assert utilisation == {0: 87.0, 1: 3.0, 2: 0.0}  # [N/A] counts as idle, not as an error
    assert uuids["GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"] == 1
    assert parse_apps(APPS, uuids) == {
        41230: [(0, 30512 * MiB)],
        41231: [(0, 1024 * MiB), (1, 512 * MiB)],
        50001: [(1, 0)],  # memory unknown (no accounting): on the GPU all the same
    }  # the process of a GPU that is not in the first query is left out


def test_a_replica_gets_its_own_processes_memory_and_the_utilisation_of_the_gpus_it_is_on():
    # A tree of a launcher (41230) and a data-parallel worker on two GPUs (41231), plus a pid not on any GPU.
    assert attribute(reading(), [41230, 41231, 999], None, requested=2) == (45.0, (30512 + 1024 + 512) * MiB)
    # Another replica on GPU 1 only: its own memory, GPU 1's utilisation; never its neighbour's memory.
    assert attribute(reading(), [50001], None, requested=1) == (3.0, 0)


def test_a_replica_holding_gpus_it_does_not_touch_reads_the_ones_it_was_given_or_zero():
    assert attribute(reading(), [777], [0, 1], requested=2) == (45.0, 0)
    assert attribute(reading(), [777], None, requested=1) == (0.0, 0)  # what the low-utilisation warning is for


def test_without_gpus_or_without_asking_for_one_the_sample_is_null():
    assert attribute(None, [41230], None, requested=1) == (None, None)
    assert attribute(GpuReading(), [41230], None, requested=1) == (None, None)
    assert attribute(reading(), [777], None, requested=0) == (None, None)


@pytest.mark.parametrize(("value", "expected"), [("0,2", [0, 2]), ("", []), ("GPU-5f2e1c4a-8d7b", None), (None, None)])
def test_cuda_visible_devices_names_gpus_by_index(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_devices(env) == expected


def fake_smi(folder: Path, script: str) -> None:
    path = folder / "nvidia-smi"
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_probe_reads_nvidia_smi_on_its_own_thread_and_never_makes_a_sampler_wait(tmp_path, monkeypatch):
    (tmp_path / "gpus.csv").write_text(GPUS)
    (tmp_path / "apps.csv").write_text(APPS)
    fake_smi(
        tmp_path,
        "#!/bin/sh\n"
        f'echo run >> "{tmp_path}/calls"\n'
        f'case "$1" in --query-gpu*) cat "{tmp_path}/gpus.csv";; *) cat "{tmp_path}/apps.csv";; esac\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    probe = GpuProbe()
    assert probe.enabled
    assert probe.refresh() == reading()  # one reading: the two queries
    assert (tmp_path / "calls").read_text().count("run") == 2
    assert probe.read() == reading()  # what samplers get: the latest, without running nvidia-smi themselves
    deadline = time.monotonic() + 10
    while (tmp_path / "calls").read_text().count("run") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    probe.close()
    assert (tmp_path / "calls").read_text().count("run") >= 4  # asked for: its thread reads again


def test_a_stale_reading_is_not_used():
    probe = GpuProbe(enabled=True)
    probe.close()  # its thread ends at once: the reading stays as old as it is
    probe._reading, probe._at = reading(), time.monotonic() - GpuProbe.STALE_AFTER - 1
    assert probe.read() is None


def test_a_failing_nvidia_smi_gives_no_reading_not_an_error(tmp_path, monkeypatch, caplog):
    fake_smi(tmp_path, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    # Whatever configured logging earlier in this process (a server or worker started in-process), the agent's
    # logger is heard here.
    monkeypatch.setattr(logging.getLogger("portal.agent"), "disabled", False)
    monkeypatch.setattr(logging.getLogger("portal.agent"), "propagate", True)
    caplog.set_level(logging.WARNING, logger="portal.agent")
    assert GpuProbe().refresh() is None
    assert "nvidia-smi failed" in caplog.text


def test_a_machine_without_nvidia_smi_never_runs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    probe = GpuProbe()
    assert probe.enabled is False
    assert probe.read() is None
