"""The sandbox of local workloads: every task, notebook and model server the local agent starts runs in namespaces of
its own, so that one tenant's workload cannot see another tenant's files, processes or tokens, nor the portal's state,
database or broker (docs/security.md, "Local runtime sandbox").

Per workload (all its replicas together, so that distributed replicas still rendezvous on 127.0.0.1):
- a network namespace with loopback only, held by a small holder process (`unshare --user --map-root-user --net
  sleep infinity`), into which pasta (from passt) forwards exactly two kinds of port: outbound, the portal's own
  HTTP port (the API and the tracking API, through which a workload reaches its project with its scoped token), and
  inbound, the workload's own serving ports (a notebook's, a model server's), on the host's loopback only. The
  database, Redis, other workloads' ports and any other host are unreachable.

Per replica: `nsenter --net` (into that namespace), `prlimit` (no core dumps, a bound on open files), then bubblewrap:
new PID, IPC, UTS, cgroup and mount namespaces, a new session, no capabilities, dies with the agent; a filesystem of
the system (/usr, /etc) and the code (the checkout and the task environments) read-only, the portal's state (its
state folder, secret key, SQLite files, media, the whole work folder) hidden, and of the work folder only what
belongs to the workload's project: its inputs read-only, its own folder writable, a private /tmp.

`PORTAL_LOCAL_SANDBOX` (auto, required, off) says what happens on a host without bubblewrap and pasta: see
`admit`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from apps.runtime import hooks
from apps.runtime.workload import Workload

log = logging.getLogger("portal.agent")

TOOLS = ("bwrap", "pasta", "unshare", "nsenter", "prlimit", "sleep")
INSTALL_HINT = "install bubblewrap and passt (`make sandbox`, or as root: apt-get install -y bubblewrap passt)"
NETNS_TIMEOUT = 5.0
PASTA_TIMEOUT = 10.0
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# The system a workload sees, read-only (the merged-/usr links of Debian are recreated as links).
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
PR_SET_PDEATHSIG = 1
HOSTNAME = "sandbox"
# /etc/hosts as a workload sees it: its own hostname is loopback, as a pod's name resolves to the pod. Not found there,
# a lookup goes on to DNS, which the namespace cannot reach: PyTorch's c10d store and gloo (and MPI, Ray) looked their
# host up at every join, warned and fell back (docs/security.md).
HOSTS = (
    f"127.0.0.1\tlocalhost\n127.0.0.1\t{HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    "::ffff:127.0.0.1\tlocalhost\n"  # loopback as a dual-stack socket names it (c10d looks its peers up)
)


class SandboxRefused(OSError):
    """This workload may not run here (the sandbox is missing and the mode says no): the agent reports it as the
    workload's failure to start, with this message."""


@dataclass(frozen=True)
class Support:
    """Whether this host can sandbox workloads, and why not."""

    available: bool
    reason: str = ""
    tools: tuple[tuple[str, str], ...] = ()

    def tool(self, name: str) -> str:
        return dict(self.tools)[name]


def mode() -> str:
    return settings.PORTAL_LOCAL_SANDBOX


@functools.cache
def support() -> Support:
    """Probe once per process: the tools are installed, and a sandbox as workloads get it starts here (the whole
    chain: holder, pasta, nsenter, bubblewrap). The reason names what is missing."""
    paths = {name: shutil.which(name) for name in TOOLS}
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        return Support(False, f"{', '.join(missing)} not found: {INSTALL_HINT}")
    found = Support(True, tools=tuple((name, str(path)) for name, path in paths.items()))
    try:
        with Network(found, outbound=[], inbound=[]) as network:
            argv = [*network.enter(), *limits(), *pid_namespace(), found.tool("bwrap"), *namespaces(), *system_view()]
            argv += ["--", "true"]
            probe = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Support(False, f"the sandbox cannot start here: {exc}")
    if probe.returncode != 0:
        detail = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        return Support(False, f"bubblewrap cannot create namespaces here ({detail}): needs root or unprivileged user "
                       "namespaces (sysctl kernel.unprivileged_userns_clone=1)")  # fmt: skip
    return found


def state() -> dict[str, object]:
    """What /readyz and the agent's start say: the mode, whether workloads are isolated, and why not."""
    chosen = mode()
    if chosen == "off":
        return {"mode": chosen, "isolated": False, "detail": "single trusted team mode (PORTAL_LOCAL_SANDBOX=off)"}
    found = support()
    if found.available:
        return {"mode": chosen, "isolated": True, "detail": "bubblewrap and pasta"}
    refusal = (
        "every local workload is refused"
        if chosen == "required"
        else "local workloads of only one project are run on this host"
    )
    return {"mode": chosen, "isolated": False, "detail": f"no sandbox: {found.reason}; {refusal}"}


def warn_at_start() -> None:
    """The agent's start: loud when workloads will not be isolated."""
    current = state()
    if current["isolated"]:
        log.info("local sandbox: on (bubblewrap and pasta)")
    else:
        log.warning("!" * 78)
        log.warning("LOCAL WORKLOADS ARE NOT ISOLATED: %s", current["detail"])
        log.warning("!" * 78)


def admit(workload: Workload, hostname: str) -> bool:
    """Whether `workload` runs sandboxed (True) or as a plain process (False); SandboxRefused when it may not run.

    Without a sandbox a workload can read every file of the portal's user and reach the database, so unless the
    operator said the host serves a single trusted team (mode "off"), such a host runs the workloads of one project
    only: the first one that ran here (mode "auto"), or none (mode "required")."""
    from apps.runtime.models import LocalWorkload

    chosen = mode()
    if chosen == "off":
        return False
    found = support()
    if found.available:
        return True
    if chosen == "required":
        raise SandboxRefused(
            f"refused: the local sandbox is required (PORTAL_LOCAL_SANDBOX=required) but {found.reason}"
        )
    other = (
        LocalWorkload.objects.filter(agent__hostname=hostname, started_at__isnull=False)
        .exclude(spec__project=workload.project)
        .order_by("started_at")
        .values_list("spec__project", flat=True)
        .first()
    )
    if other is not None:
        raise SandboxRefused(
            f"refused: this host cannot isolate workloads ({found.reason}), so it runs those of one project only, "
            f"and project {other!r} ran here first. Install the sandbox, or set PORTAL_LOCAL_SANDBOX=off if every "
            "project belongs to one trusted team"
        )
    return False


# --- the network ----------------------------------------------------------------------------------------------------


def _die_with_agent() -> None:  # pragma: no cover (runs in the child between fork and exec)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _netns_of(pid: int) -> str | None:
    """The network namespace of process `pid` (None when it cannot be read, e.g. not yet or no longer there)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _wait_for(
    ready: Callable[[], bool], proc: subprocess.Popen, timeout: float, *, failed: Callable[[], str], late: str
) -> None:
    """Poll `ready` (every 2 ms: these steps take milliseconds and each one delays the workload's start) until it
    holds. OSError with `failed()` when `proc`, which should make it hold, exits first; with `late` after `timeout`
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise OSError(failed())
        if ready():
            return
        if time.monotonic() > deadline:
            raise OSError(late)
        time.sleep(0.002)


class Network:
    """A workload's network namespace: loopback, plus pasta's forwards (`outbound` ports of the host's loopback,
    `inbound` ports the host's loopback forwards in). A context manager; `close` ends pasta and the holder."""

    def __init__(self, found: Support, *, outbound: list[int], inbound: list[int]) -> None:
        self.found = found
        self.holder: subprocess.Popen | None = None
        self.pasta: subprocess.Popen | None = None
        unshare = [found.tool("unshare"), "--user", "--map-root-user", "--net", "--", found.tool("sleep"), "infinity"]
        ours = os.readlink("/proc/self/ns/net")
        self.holder = subprocess.Popen(
            unshare, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_die_with_agent,
        )  # fmt: skip
        try:
            # pasta must attach to the new namespace, never to the agent's own
            _wait_for(
                lambda: _netns_of(self.holder.pid) not in (None, ours), self.holder, NETNS_TIMEOUT,
                failed=lambda: f"no network namespace: {self.holder.stderr.read().decode(errors='replace').strip()}",
                late="no network namespace: the holder did not start in time",
            )  # fmt: skip
            ready = tempfile.NamedTemporaryFile(prefix="pasta-", suffix=".pid", delete=False)  # noqa: SIM115
            ready.close()
            pasta = [
                found.tool("pasta"), *(["--runas", "0"] if os.geteuid() == 0 else []), "--quiet", "--foreground",
                "--pid", ready.name, "-T", ",".join(str(port) for port in outbound) or "none",
                *[arg for port in inbound for arg in ("-t", f"127.0.0.1/{port}")], *([] if inbound else ["-t", "none"]),
                "-u", "none", "-U", "none", str(self.holder.pid),
            ]  # fmt: skip
            # In the foreground, as a child of the agent: pasta outlives the namespace it serves (it does not notice
            # the holder's end), so `close` stops it, and it dies with the agent. It writes its pid file once its
            # forwards listen: that is the moment the workload may start.
            self.pasta = subprocess.Popen(
                pasta, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_agent,
            )  # fmt: skip
            try:
                _wait_for(
                    lambda: os.path.getsize(ready.name) > 0, self.pasta, PASTA_TIMEOUT,
                    failed=self._pasta_failure, late="pasta did not set up the network in time",
                )  # fmt: skip
            finally:
                os.unlink(ready.name)
        except BaseException:
            self.close()
            raise

    def _pasta_failure(self) -> str:
        assert self.pasta is not None
        lines = [x for x in self.pasta.stderr.read().decode(errors="replace").splitlines() if x]
        lines = [line for line in lines if "syslog" not in line]
        return f"pasta failed: {(lines or ['exit code ' + str(self.pasta.returncode)])[-1]}"

    def enter(self) -> list[str]:
        """The command prefix that starts a process inside this namespace."""
        assert self.holder is not None
        if os.geteuid() == 0:
            return [self.found.tool("nsenter"), f"--net=/proc/{self.holder.pid}/ns/net", "--"]
        return [
            self.found.tool("nsenter"), "-t", str(self.holder.pid), "--user", "--net", "--preserve-credentials", "--",
        ]  # fmt: skip

    def alive(self) -> bool:
        return self.holder is not None and self.holder.poll() is None

    def close(self) -> None:
        for proc in (self.pasta, self.holder):
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
            if proc is not None and proc.stderr is not None:
                proc.stderr.close()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def portal_port() -> list[int]:
    """The portal's own HTTP port on this host's loopback (what SITE_URL names), the one port a workload reaches."""
    url = urlsplit(settings.SITE_URL)
    if url.hostname not in LOOPBACK_HOSTS:
        return []
    return [url.port or (443 if url.scheme == "https" else 80)]


def open_network(workload: Workload) -> Network | Lease:
    """The network namespace `workload` runs in (`close` it when the workload ends). A workload that serves ports
    (a notebook, a model server) gets one of its own; the others of one project share one while the project keeps
    it busy: pasta takes 0.1–0.7 s to start here, which a pipeline of short tasks would pay at every node. Sharing
    lets a project's concurrent tasks reach each other's ports, which is no more than they share on disk."""
    inbound = sorted({int(p) for p in workload.ports.values() if p})
    if inbound:
        return Network(support(), outbound=portal_port(), inbound=inbound)
    return _pool.acquire(workload.project, portal_port())


class Lease:
    """A workload's use of a project's shared namespace: `close` hands it back to the pool."""

    def __init__(self, pool: _Pool, key: tuple, network: Network) -> None:
        self.pool, self.key, self.network = pool, key, network
        self.closed = False

    def enter(self) -> list[str]:
        return self.network.enter()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.release(self.key)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Pool:
    """Namespaces shared by a project's workloads without ports of their own, closed IDLE_SECONDS after their last
    workload ended."""

    IDLE_SECONDS = 30.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple, list] = {}  # key → [network, users, idle since (monotonic) or None]

    def acquire(self, project: str, outbound: list[int]) -> Lease:
        key = (project, tuple(outbound))
        self.close_idle()
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None and entry[0].alive():
                entry[1] += 1
                entry[2] = None
                return Lease(self, key, entry[0])
        network = Network(support(), outbound=outbound, inbound=[])  # outside the lock: it takes a while
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None and entry[0].alive():  # another thread made one meanwhile: use it
                entry[1] += 1
                entry[2] = None
                spare = network
            else:
                self.entries[key] = [network, 1, None]
                spare = None
            lease = Lease(self, key, self.entries[key][0])
        if spare is not None:
            spare.close()
        return lease

    def release(self, key: tuple) -> None:
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                entry[2] = time.monotonic()
        timer = threading.Timer(self.IDLE_SECONDS + 0.1, self.close_idle)
        timer.daemon = True
        timer.start()

    def close_idle(self) -> None:
        now = time.monotonic()
        with self.lock:
            idle = [
                key
                for key, (network, users, since) in self.entries.items()
                if users <= 0 and ((since is not None and now - since >= self.IDLE_SECONDS) or not network.alive())
            ]
            closing = [self.entries.pop(key)[0] for key in idle]
        for network in closing:
            network.close()


_pool = _Pool()


# --- the process and its filesystem ---------------------------------------------------------------------------------


def pid_namespace() -> list[str]:
    """The PID namespace comes from `unshare --fork`, not from bubblewrap's --unshare-pid: bubblewrap's own init
    reports the exit code and its monitor exits without reaping it, so wait4 would miss every CPU second the
    workload used. unshare waits for bubblewrap, which (pid 1 in there) waits for the command: wait4 sees it all,
    and when bubblewrap exits the kernel kills whatever is left in the namespace."""
    return [shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]


def namespaces() -> list[str]:
    return [
        "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", HOSTNAME,
    ]  # fmt: skip


def hosts_file() -> Path:
    """The file bound as the workloads' /etc/hosts (HOSTS), in the portal's state folder (hidden from workloads; a
    bind takes its source from the host's filesystem all the same)."""
    path = Path(settings.VAR_DIR) / "sandbox" / "hosts"
    if not path.is_file() or path.read_text() != HOSTS:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = path.with_name(f"hosts.{os.getpid()}.{threading.get_ident()}")
        fresh.write_text(HOSTS)
        fresh.replace(path)  # atomic: a workload starting meanwhile binds the old file or the new one, never half
    return path


def limits() -> list[str]:
    """No core dumps (a dump holds the process's memory: tokens, data), and a bound on open files (never above the
    agent's own hard limit, which an unprivileged prlimit could not raise)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = (
        settings.PORTAL_LOCAL_SANDBOX_NOFILE
        if hard == resource.RLIM_INFINITY
        else min(settings.PORTAL_LOCAL_SANDBOX_NOFILE, hard)
    )
    return [shutil.which("prlimit") or "prlimit", "--core=0", f"--nofile={nofile}", "--"]


def system_view() -> list[str]:
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind", str(hosts_file()), "/etc/hosts"]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]


def _venv_roots(python: str) -> set[Path]:
    """A task environment's folders: the venv (links resolved) and the installation its pyvenv.cfg names."""
    roots: set[Path] = set()
    venv = Path(python).parent.parent
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        roots.add(venv.resolve())
        for line in cfg.read_text(errors="replace").splitlines():
            key, _sep, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                roots.add(Path(value.strip()).resolve().parent)
    elif Path(python).exists():
        roots.add(Path(python).resolve().parent.parent)
    return roots


@functools.cache
def code_roots() -> tuple[Path, ...]:
    """What every workload may read: the checkout and the task environments (code, never state)."""
    roots = {Path(settings.BASE_DIR).resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    for python in settings.PORTAL_TASK_ENVS.values():
        roots |= _venv_roots(python)
    if settings.PORTAL_CODE_SERVER and Path(settings.PORTAL_CODE_SERVER).exists():
        roots.add(Path(settings.PORTAL_CODE_SERVER).resolve().parent.parent)
    system = [Path(p) for p in SYSTEM_DIRS]
    kept = {root for root in roots if root.is_dir() and not any(_under(root, s) for s in system) and root != Path("/")}
    # A folder inside another is bound with it.
    return tuple(sorted(root for root in kept if not any(root != other and _under(root, other) for other in kept)))


def hidden_paths() -> list[Path]:
    """The portal's state, wherever it lies: none of it may be seen from a workload."""
    db = settings.DATABASES["default"]
    paths = [
        settings.VAR_DIR, Path(settings.BASE_DIR) / "var", settings.PORTAL_WORK_DIR, settings.MEDIA_ROOT,
        os.environ.get("SECRET_KEY_FILE"), getattr(settings, "DATASETS_UPLOAD_DIR", None),
        getattr(settings, "CELERY_BROKER_DIR", None), settings.PORTAL_SUPERVISOR_STATE,
        Path(settings.BASE_DIR) / ".env",
    ]  # fmt: skip
    if db["ENGINE"].endswith("sqlite3"):
        paths += [db["NAME"], db.get("TEST", {}).get("NAME")]
    return [Path(p).absolute() for p in paths if p]


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _project_paths(workload: Workload, cwd: str, env: dict[str, str]) -> list[tuple[Path, bool]]:
    """(path, writable) of the work folder a workload sees: its project's folders read-only (a task's inputs are
    its upstream tasks' outputs there), its own folder writable (a notebook also its project's shared folder), and
    the materialised datasets its command or env names (by content digest) read-only."""
    work = Path(settings.PORTAL_WORK_DIR).absolute()
    slug = workload.project
    binds: list[tuple[Path, bool]] = [
        (work / slug, False),
        (work / "serving" / slug, False),
        (work / "projects" / slug / "shared", workload.kind == "notebook"),
        (Path(cwd).absolute(), True),
    ]
    if env.get("PORTAL_OUTPUT_DIR"):
        binds.append((Path(env["PORTAL_OUTPUT_DIR"]).absolute(), True))
    binds = [(path, rw) for path, rw in binds if _under(path, work) and slug and path.exists()]
    # What the apps owning other files let it read (datasets: the versions it names; serving: a server's model).
    return binds + [(path, False) for path in hooks.readable_paths(workload, env) if path.exists()]


def wrap(
    argv: list[str], cwd: str, env: dict[str, str], workload: Workload, network: Network | Lease
) -> tuple[list, dict]:
    """The command line and env that run `argv` sandboxed in `network`."""
    found = support()
    binds = [arg for root in code_roots() for arg in ("--ro-bind", str(root), str(root))]
    bound = [*(Path(p) for p in SYSTEM_DIRS), *code_roots()]
    hides: list[str] = []
    hidden: list[Path] = []
    for path in sorted(set(hidden_paths()), key=lambda p: len(p.parts)):
        if not any(_under(path, root) for root in bound) or any(_under(path, h) for h in hidden) or not path.exists():
            continue  # outside what is bound, or inside a folder already hidden: nothing to hide
        hidden.append(path)
        hides += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    data: list[str] = []
    for path, writable in sorted(_project_paths(workload, cwd, env), key=lambda b: (len(b[0].parts), b[1])):
        data += ["--bind" if writable else "--ro-bind", str(path), str(path)]
    scrubbed = dict(env)
    if "HOME" not in workload.env:  # the agent's HOME is not there: a private one
        scrubbed["HOME"] = "/tmp"
    scrubbed["TMPDIR"] = "/tmp"
    command = [
        *network.enter(), *limits(), *pid_namespace(), found.tool("bwrap"), *namespaces(), *system_view(), *binds,
        *hides, *data,
        "--chdir", str(Path(cwd).absolute()), "--", *argv,
    ]  # fmt: skip
    return command, scrubbed
