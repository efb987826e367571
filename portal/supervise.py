"""`python -m portal.supervise [-f Procfile] [name …]`: what `make run` starts — the Procfile's processes, each
restarted with exponential backoff when it exits, none taken down by another.

honcho (which `make run` used before) stops every process as soon as one exits: one worker crash took the web server,
beat and the agent with it. supervisord and circus restart processes, but each is a daemon with its own
configuration language and control socket; the embedded mode needs a foreground process a newcomer stops with
Ctrl-C, which reads the Procfile the image's docs and tests already use. So this is small and ours:

- each process runs `/bin/sh -c <command>` (as honcho does: the Procfile's `VAR=value cmd` prefixes work) in a
  session of its own, so a signal reaches its whole tree and a terminal's Ctrl-C reaches only the supervisor;
- a process is `starting` until it has stayed up `--start-secs`, then `running` (supervisord's startsecs); when it
  exits it is `restarting` and starts again after `--backoff` × 2^(n−1) seconds (at most `--backoff-max`), n being
  its exits in a row without `--stable-secs` of uptime between them;
- the state of every process (state, pid, restarts, last exit) is written to a JSON file (`--state`, default
  `$PORTAL_VAR_DIR/supervisor.json`) whose path the children get as PORTAL_SUPERVISOR_STATE: /readyz reads it and
  is not ready, naming the process, while one is not running;
- SIGINT or SIGTERM stops them all: SIGTERM to each process group, SIGKILL to what is left after `--stop-timeout`
  (a second Ctrl-C: at once).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

BASE_DIR = Path(__file__).resolve().parent.parent
TICK = 0.1  # seconds between looks at the children


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_procfile(text: str) -> dict[str, str]:
    """`name: command` lines, in order; blank lines and `#` comments skipped."""
    processes: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, command = line.partition(":")
        if not colon or not name.strip() or not command.strip():
            raise ValueError(f"Procfile line {number}: expected `name: command`, got {raw!r}")
        processes[name.strip()] = command.strip()
    return processes


def signal_group(pgid: int, signum: int) -> None:
    """Signal a child's whole process group (a session of its own), if anything of it is left."""
    with suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def describe_exit(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return {"code": None, "signal": name}
    return {"code": returncode, "signal": None}


@dataclass
class Child:
    """One Procfile process and what the supervisor knows about it."""

    name: str
    command: str
    proc: subprocess.Popen | None = None
    state: str = "starting"  # starting → running; restarting after an exit; stopped at the end
    since: str = field(default_factory=now_iso)
    started: float = 0.0  # monotonic time of the last start
    restarts: int = 0
    failures: int = 0  # exits in a row without a stable run between them: the backoff's exponent
    restart_at: float | None = None
    restart_at_iso: str | None = None
    last_exit: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "pid": self.proc.pid if self.proc is not None else None,
            "since": self.since,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "restart_at": self.restart_at_iso if self.state == "restarting" else None,
            "command": self.command,
        }


class Supervisor:
    def __init__(
        self,
        processes: dict[str, str],
        *,
        state_file: Path,
        backoff: float = 1.0,
        backoff_max: float = 30.0,
        start_secs: float = 1.0,
        stable_secs: float = 60.0,
        stop_timeout: float = 10.0,
        out: IO[str] | None = None,
    ) -> None:
        self.children = [Child(name, command) for name, command in processes.items()]
        self.state_file = state_file
        self.backoff, self.backoff_max = backoff, backoff_max
        self.start_secs, self.stable_secs, self.stop_timeout = start_secs, stable_secs, stop_timeout
        self.out = out or sys.stdout
        self.width = max(len(c.name) for c in self.children) if self.children else 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.signals = 0
        self.pumps: list[threading.Thread] = []
        self.started_at = now_iso()

    # --- output ---------------------------------------------------------------------------------------------
    def say(self, name: str, line: str) -> None:
        with self.lock:
            self.out.write(f"{datetime.now().strftime('%H:%M:%S')} {name:<{self.width}} | {line}\n")
            self.out.flush()

    def pump(self, child_name: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.say(child_name, raw.decode("utf-8", "replace").rstrip("\n"))
        stream.close()

    # --- state file -----------------------------------------------------------------------------------------
    def write_state(self) -> None:
        state = {
            "supervisor": {"pid": os.getpid(), "started_at": self.started_at, "updated_at": now_iso()},
            "processes": {c.name: c.as_json() for c in self.children},
        }
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: /readyz never reads half a file.
        fd, temporary = tempfile.mkstemp(prefix=".supervisor-", dir=self.state_file.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh, indent=1)
        os.replace(temporary, self.state_file)

    # --- processes ------------------------------------------------------------------------------------------
    def start(self, child: Child) -> None:
        env = {**os.environ, "PORTAL_SUPERVISOR_STATE": str(self.state_file), "PYTHONUNBUFFERED": "1"}
        child.proc = subprocess.Popen(
            ["/bin/sh", "-c", child.command],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: signals reach its whole tree, Ctrl-C only us
        )
        child.state, child.since, child.started = "starting", now_iso(), time.monotonic()
        child.restart_at = child.restart_at_iso = None
        pump = threading.Thread(target=self.pump, args=(child.name, child.proc.stdout), daemon=True)
        pump.start()
        self.pumps.append(pump)
        self.say("supervise", f"{child.name} started (pid {child.proc.pid})")

    def exited(self, child: Child, returncode: int) -> None:
        uptime = time.monotonic() - child.started
        signal_group(child.proc.pid, signal.SIGKILL)  # what it left in its group (a pool, a port holder) goes too
        child.last_exit = {**describe_exit(returncode), "at": now_iso(), "after_seconds": round(uptime, 1)}
        child.proc = None
        if uptime >= self.stable_secs:
            child.failures = 0  # it had been fine for a while: start again soon
        child.failures += 1
        delay = min(self.backoff * 2 ** (child.failures - 1), self.backoff_max)
        child.state, child.since = "restarting", now_iso()
        child.restart_at = time.monotonic() + delay
        child.restart_at_iso = datetime.fromtimestamp(time.time() + delay, UTC).isoformat(timespec="seconds")
        child.restarts += 1
        how = f"signal {child.last_exit['signal']}" if child.last_exit["signal"] else f"code {returncode}"
        self.say("supervise", f"{child.name} exited ({how}) after {uptime:.1f} s; restarting in {delay:g} s")

    def step(self) -> bool:
        """One look at every child; True when something changed."""
        changed = False
        now = time.monotonic()
        for child in self.children:
            if child.proc is not None:
                returncode = child.proc.poll()
                if returncode is not None:
                    self.exited(child, returncode)
                    changed = True
                elif child.state == "starting" and now - child.started >= self.start_secs:
                    child.state, child.since = "running", now_iso()
                    changed = True
            elif child.restart_at is not None and now >= child.restart_at:
                self.start(child)
                changed = True
        return changed

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.signals += 1
        self.stopping.set()
        if self.signals > 1:  # a second Ctrl-C: no more waiting
            self.kill_all(signal.SIGKILL)

    def kill_all(self, signum: int) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                signal_group(child.proc.pid, signum)

    def stop_all(self) -> None:
        self.say("supervise", "stopping every process")
        self.kill_all(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(c.proc is not None and c.proc.poll() is None for c in self.children):
            if time.monotonic() >= deadline:
                self.say("supervise", f"still running after {self.stop_timeout:g} s: SIGKILL")
                self.kill_all(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(TICK)
        for child in self.children:
            if child.proc is not None:
                child.last_exit = {**describe_exit(child.proc.returncode), "at": now_iso()}
                # The group may hold processes the shell started and left: stop them with it.
                signal_group(child.proc.pid, signal.SIGKILL)
                child.proc = None
            child.state, child.since = "stopped", now_iso()
        for pump in self.pumps:
            pump.join(timeout=2)
        self.write_state()

    def run(self) -> int:
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGTERM, self.on_signal)
        for child in self.children:
            self.start(child)
        self.write_state()
        while not self.stopping.is_set():
            if self.step():
                self.write_state()
            self.stopping.wait(TICK)
        self.stop_all()
        return 0


def default_state_file() -> Path:
    return Path(os.environ.get("PORTAL_VAR_DIR") or BASE_DIR / "var") / "supervisor.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.supervise", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="the Procfile's processes to run (default: all)")
    parser.add_argument("-f", "--procfile", default=str(BASE_DIR / "Procfile"))
    parser.add_argument("--state", type=Path, default=None, help="the state file (default: $PORTAL_VAR_DIR/…)")
    parser.add_argument("--backoff", type=float, default=1.0, help="seconds before the first restart")
    parser.add_argument("--backoff-max", type=float, default=30.0, help="the longest wait between restarts")
    parser.add_argument("--start-secs", type=float, default=1.0, help="uptime after which a process is running")
    parser.add_argument("--stable-secs", type=float, default=60.0, help="uptime that resets the backoff")
    parser.add_argument("--stop-timeout", type=float, default=10.0, help="SIGTERM to SIGKILL, in seconds")
    args = parser.parse_args(argv)
    processes = parse_procfile(Path(args.procfile).read_text())
    unknown = [name for name in args.names if name not in processes]
    if unknown:
        parser.error(f"not in {args.procfile}: {', '.join(unknown)}")
    if args.names:
        processes = {name: processes[name] for name in args.names}
    supervisor = Supervisor(
        processes,
        state_file=(args.state or default_state_file()).resolve(),
        backoff=args.backoff,
        backoff_max=args.backoff_max,
        start_secs=args.start_secs,
        stable_secs=args.stable_secs,
        stop_timeout=args.stop_timeout,
    )
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
