"""Shared set-up of the benchmarks: a throwaway database, a private Redis prefix, and helper processes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def prepare(name: str) -> Path:
    """Point this process (and its children) at a fresh database and Redis prefix; returns the var dir."""
    var = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    db = os.environ.get("BENCH_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/portal_bench_{name}")
    os.environ.update(
        DATABASE_URL=db,
        REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/10"),
        REDIS_PREFIX=f"bench-{name}-{os.getpid()}",
        PORTAL_VAR_DIR=str(var),
        SECRET_KEY="bench-only",
        DJANGO_SETTINGS_MODULE="portal.settings",
        LOG_LEVEL="WARNING",
    )
    if db.startswith("postgres"):
        import psycopg

        base, _slash, dbname = db.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{dbname}"')
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    return var


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_seconds(*procs: subprocess.Popen | int) -> float:
    """User + system CPU time of `procs` (processes or pids) and their children so far (the Celery worker's pool
    processes; `mlflow models serve`'s uvicorn; a replica's model server under its wrapper)."""
    import psutil

    total = 0.0
    for proc in procs:
        try:
            root = psutil.Process(proc if isinstance(proc, int) else proc.pid)
            for each in (root, *root.children(recursive=True)):
                times = each.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def database_cpu_seconds() -> float:
    """CPU time of the PostgreSQL server so far (0 on SQLite or when it cannot be read): its processes now, plus
    the backends that already exited (a connection closed by a thread that ended), which the postmaster's
    children times hold. Every database's work counts: run benchmarks on a quiet server."""
    import psutil
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        return 0.0
    total = 0.0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or ()
            if cmdline and cmdline[0].endswith("/postgres") and "-D" in cmdline:  # the postmaster
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
            elif cmdline and cmdline[0].startswith("postgres: "):
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def wait_for(predicate, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)
