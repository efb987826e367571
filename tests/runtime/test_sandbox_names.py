"""Names inside the local sandbox. bubblewrap gives a workload a hostname of its own ("sandbox"), which must resolve,
to loopback, as a pod's own name does: libraries that look their host up (PyTorch's c10d store and gloo, MPI, Ray)
otherwise ask DNS from a namespace that reaches no DNS server, warn, and fall back or fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest

from apps.runtime.local import sandbox
from apps.runtime.workload import Workload

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in sandbox.TOOLS),
    reason=f"the sandbox is not installed: {sandbox.INSTALL_HINT}",
)

LOOKUP = textwrap.dedent(
    """
    import json, socket
    def addresses(name):
        try:
            return sorted({info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)})
        except socket.gaierror as exc:
            return f"unresolved: {exc}"
    def peer(address):
        try:
            return socket.getnameinfo((address, 0, 0, 0), socket.NI_NAMEREQD)[0]
        except socket.gaierror as exc:
            return f"unresolved: {exc}"
    name = socket.gethostname()
    print(json.dumps({"hostname": name, "own": addresses(name), "localhost": addresses("localhost"),
                      "mapped_peer": peer("::ffff:127.0.0.1")}))
    """
)


@pytest.fixture
def run_sandboxed(tmp_path, settings):
    """Run Python code as a task of project "alpha" in the sandbox the agent gives it (sandbox.wrap); its stdout."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    folder = tmp_path / "work" / "alpha" / "run-1" / "probe" / "attempt-1"
    folder.mkdir(parents=True)

    def run(code: str) -> str:
        workload = Workload(
            uid=f"names-{uuid.uuid4().hex[:8]}", name="names", project="alpha", command=[sys.executable, "-c", code],
            workdir=str(folder),
        )  # fmt: skip
        with sandbox.Network(sandbox.support(), outbound=[], inbound=[]) as network:
            argv, env = sandbox.wrap(workload.command, str(folder), {"PATH": os.environ["PATH"]}, workload, network)
            done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def test_a_workload_resolves_its_own_hostname_to_loopback(run_sandboxed):
    found = json.loads(run_sandboxed(LOOKUP))

    assert found["hostname"] == "sandbox"
    assert found["own"] == ["127.0.0.1"]
    assert found["localhost"] == ["127.0.0.1"]


def test_a_workload_names_a_loopback_peer_of_a_dual_stack_socket(run_sandboxed):
    """A server on a dual-stack socket (PyTorch's c10d store) sees its loopback clients as ::ffff:127.0.0.1."""
    found = json.loads(run_sandboxed(LOOKUP))

    assert found["mapped_peer"] == "localhost"
