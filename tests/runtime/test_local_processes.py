"""The local runtime's view of a replica's processes: CPU % and memory of a real process tree across samples,
and what wait4 reports of a replica that exited or was killed."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from apps.runtime.local.processes import ExitWaiter, TreeSampler, kill_tree

BURN = "import time\nwhile True: pass\n"
# A child that burns too: the tree's CPU is its own and its descendants'.
BURN_IN_CHILD = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}])\n"


def spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def sample_until(sampler: TreeSampler, cpu_seconds: float) -> float:
    """Sample until the tree has used `cpu_seconds` of CPU (bounded, so a broken sampler fails rather than hangs);
    returns the last CPU %."""
    deadline = time.monotonic() + 30
    percent = 0.0
    while sampler.cpu_seconds < cpu_seconds and time.monotonic() < deadline:
        time.sleep(0.2)
        percent, _rss = sampler.sample()
    return percent


def test_a_process_burning_cpu_reads_a_non_zero_percentage():
    proc = spawn(BURN)
    try:
        sampler = TreeSampler(proc.pid)
        assert sampler.sample() == (0.0, sampler.rss)  # the first sample primes
        percent = sample_until(sampler, 0.3)
        assert sampler.cpu_seconds >= 0.3
        assert percent > 0
        assert sampler.rss > 0
        assert sampler.peak_rss >= sampler.rss
    finally:
        kill_tree(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_cpu_of_a_descendant_counts_for_the_tree():
    proc = spawn(BURN_IN_CHILD)
    try:
        sampler = TreeSampler(proc.pid)
        sampler.sample()
        assert sample_until(sampler, 0.3) > 0
    finally:
        kill_tree(proc.pid, signal.SIGKILL)
        proc.wait()


def own_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_killed_replica_keeps_the_cpu_it_used_and_its_peak_memory():
    size = own_peak() + 64 * 2**20  # above what a child inherits from this process (see the next test)
    code = f"block = b'x' * {size}\nprint('held', flush=True)\nwhile True: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    exits = ExitWaiter([proc])
    try:
        # Killed only once the block is resident: on a busy machine 0.3 s of CPU was spent still allocating it.
        assert proc.stdout.readline() == b"held\n"
        sampler = TreeSampler(proc.pid)
        sampler.sample()
        sample_until(sampler, 0.3)
        assert exits.poll(proc) is None
        kill_tree(proc.pid, signal.SIGKILL)
        assert exits.reap(proc) == -signal.SIGKILL
    finally:
        exits.close()
        proc.stdout.close()
    assert exits.cpu[proc.pid] >= 0.3  # exact, from wait4: not lost with the killed process
    assert exits.peak[proc.pid] >= size


def test_a_replicas_peak_is_its_own_not_the_peak_it_inherits_from_the_agent():
    """Linux carries a process's peak RSS across execve: a small task started by a big agent reported the agent's
    peak as its own, and a task under a 512 MiB limit that used 20 MiB was failed as OOMKilled."""
    held = bytearray(300 * 2**20)
    for offset in range(0, len(held), 4096):  # resident, not only reserved
        held[offset] = 1
    del held
    assert own_peak() >= 300 * 2**20
    proc = spawn("pass")
    exits = ExitWaiter([proc])
    try:
        assert exits.reap(proc) == 0
    finally:
        exits.close()
    assert exits.peak[proc.pid] < 100 * 2**20  # unknown (0): the sampled peaks stand in


# An agent that reaps a 200 MiB burst with ExitWaiter and prints the peak it reads (started below by a process
# holding more than the burst).
AGENT = """
import subprocess, sys
from apps.runtime.local.processes import ExitWaiter
burst = subprocess.Popen([sys.executable, "-c", "block = b'x' * (200 * 2**20)\\ndel block\\n"])
exits = ExitWaiter([burst])
assert exits.reap(burst) == 0
exits.close()
print(exits.peak[burst.pid])
"""


def test_a_burst_is_measured_even_when_the_agent_was_started_by_a_bigger_process():
    """The agent's own peak, under which a replica's wait4 peak says nothing, is that of its own memory, not the
    ru_maxrss it inherited at its start: an agent started by a pytest worker that had grown past 400 MiB lost every
    burst below that, and a task that held 400 MiB under a 128 MiB limit for less than the watchdog's look
    succeeded (CI, tests/jobs/test_agent_usage.py)."""
    parent = f"""
import subprocess, sys
held = b'y' * (400 * 2**20)
sys.stdout.write(subprocess.run([sys.executable, "-c", {AGENT!r}], capture_output=True, text=True, check=True).stdout)
"""
    root = Path(__file__).resolve().parents[2]  # where `apps` imports from
    out = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, timeout=120, check=True, cwd=root
    )
    assert 200 * 2**20 <= int(out.stdout) < 400 * 2**20


def test_exit_waiter_reaps_a_replica_that_exits_and_reads_what_it_used():
    proc = spawn("import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n")
    exits = ExitWaiter([proc])
    try:
        deadline = time.monotonic() + 30
        while exits.poll(proc) is None and time.monotonic() < deadline:
            exits.wait(1)
    finally:
        exits.close()
    assert proc.returncode == 0
    assert exits.cpu[proc.pid] >= 0.2


def test_forked_workers_sharing_their_parents_memory_are_charged_it_once():
    # 200 MiB written by the parent, then four forked workers that only read it: their RSS each counts it, a cgroup
    # (and the limit watchdog) once.
    code = (
        "import os, time\nblock = b'x' * (200 * 2**20)\n"
        "for _ in range(4):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "print('forked', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"forked\n"
        sampler = TreeSampler(proc.pid)
        sampler.sample()
        assert sampler.rss > 800 * 2**20  # five resident sets holding the block
        assert 200 * 2**20 < sampler.charged < 400 * 2**20
        assert 200 * 2**20 < sampler.memory() < 400 * 2**20  # the watchdog's look between samples: the same
    finally:
        kill_tree(proc.pid, signal.SIGKILL)
        proc.wait()
