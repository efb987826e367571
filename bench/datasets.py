"""Dataset upload throughput: a 2 GB file through the API in chunks vs a plain file copy on the same disk.

The portal runs as it does in production (uvicorn, one process); the client is `apps.datasets.publish.Client`
(64 MiB chunks by default, `Upload-Offset`, whole-file SHA-256 verified by the server). Prints both throughputs, their
ratio, the web process's peak RSS growth (targets: ≥ 0.5× copy speed, RSS growth < 100 MB) and the CPU time
of the web process and of the client during the upload (steadier than wall times on a shared machine).

    .venv/bin/python bench/datasets.py [--size-mb 2048] [--chunk-mb 64]
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

from _env import PYTHON, ROOT, prepare, start, stop, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_file(path: Path, size: int) -> None:
    block = os.urandom(64 * 2**20)
    with path.open("wb") as fh:
        left = size
        while left:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        import psutil

        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)


def cpu_seconds(proc=None) -> tuple[float, float]:
    """(user, system) CPU time of `proc` (a psutil.Process) or of this process, all threads."""
    import psutil

    times = (proc or psutil.Process()).cpu_times()
    return times.user, times.system


def settings_database() -> str:
    from django.conf import settings

    return "SQLite" if "sqlite" in settings.DATABASES["default"]["ENGINE"] else "PostgreSQL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--chunk-mb", type=int, default=64)
    parser.add_argument("--pipeline", type=int, default=2, help="Chunks in flight (connections).")
    args = parser.parse_args()
    size = args.size_mb * 2**20
    var = prepare("datasets")
    sys.path.insert(0, str(ROOT))

    from apps.accounts.services import create_token
    from apps.datasets.publish import Client, sha256_of
    from apps.datasets.services import create_dataset
    from apps.projects.services import create_project
    from tests.factories import UserFactory

    source = var / "source.bin"
    print(f"writing a {args.size_mb} MiB test file in {var} …", flush=True)
    make_file(source, size)

    started = time.perf_counter()
    shutil.copyfile(source, var / "copy.bin")
    nosync_s = time.perf_counter() - started
    with (var / "copy.bin").open("rb+") as fh:
        os.fsync(fh.fileno())
    copy_s = time.perf_counter() - started
    (var / "copy.bin").unlink()

    started = time.perf_counter()
    digest = sha256_of(source)
    client_hash_s = time.perf_counter() - started

    owner = UserFactory(username="bench")
    project = create_project(owner, slug="bench", name="Bench")
    dataset = create_dataset(project, owner, name="big")
    _token, raw = create_token(owner, name="bench")

    port = free_port()
    web = start(
        [PYTHON, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        var / "web.log",
    )  # fmt: skip
    client = Client(f"http://127.0.0.1:{port}/api/v1/", raw, timeout=600)
    try:

        def up() -> bool:
            try:
                return client.request("GET", "datasets/")[0] == 200
            except OSError:
                return False

        wait_for(up, timeout=60, what="web server")
        sampler = RssSampler(web.pid)
        baseline = sampler.rss()
        sampler.start()
        web_cpu, client_cpu = cpu_seconds(sampler.proc), cpu_seconds()
        started = time.perf_counter()
        session = client.json("POST", "dataset-uploads/", {"project": "bench", "dataset": dataset.pk})
        upload = client.json(
            "POST", f"dataset-uploads/{session['id']}/files/", {"path": "big.bin", "size": size, "sha256": digest}
        )
        client.send_file(upload, source, chunk=args.chunk_mb * 2**20, pipeline=args.pipeline)
        version = client.json("POST", f"dataset-uploads/{session['id']}/commit/", {})
        upload_s = time.perf_counter() - started
        web_cpu = tuple(b - a for a, b in zip(web_cpu, cpu_seconds(sampler.proc), strict=True))
        client_cpu = tuple(b - a for a, b in zip(client_cpu, cpu_seconds(), strict=True))
        sampler.running = False
        sampler.join()
        assert version["total_size"] == size
    finally:
        client.close()
        stop(web)

    mb = size / 2**20
    growth = (sampler.peak - baseline) / 2**20
    print(
        f"\n{args.size_mb} MiB file, {args.chunk_mb} MiB chunks, {args.pipeline} in flight, one uvicorn process, "
        f"{os.cpu_count()} cores"
    )
    print(f"plain copy (shutil.copyfile + fsync) {copy_s:8.2f} s  {mb / copy_s:8.1f} MiB/s")
    print(f"API upload + verify + commit         {upload_s:8.2f} s  {mb / upload_s:8.1f} MiB/s")
    print(f"ratio upload/copy speed              {copy_s / upload_s:8.2f}×   (target ≥ 0.5×)")
    print(f"(copy without fsync: {nosync_s:.2f} s, {mb / nosync_s:.1f} MiB/s, ratio {nosync_s / upload_s:.2f}×;"
          " the portal fsyncs each blob before a version can point at it)")  # fmt: skip
    print(f"web RSS: baseline {baseline / 2**20:.0f} MiB, peak {sampler.peak / 2**20:.0f} MiB, growth {growth:.0f} MiB"
          "   (target < 100 MB)")  # fmt: skip
    print(f"CPU during the upload (user + system): web process {web_cpu[0]:.2f} + {web_cpu[1]:.2f} s, "
          f"client {client_cpu[0]:.2f} + {client_cpu[1]:.2f} s")  # fmt: skip
    print(f"(client-side SHA-256 of the file, not in the upload time: {client_hash_s:.2f} s)")
    ratio = copy_s / upload_s
    print(
        f"\n| dataset upload, {args.size_mb / 1024:g} GiB | {mb / upload_s:,.0f} MiB/s = {ratio:.2f}× of copy + "
        f"fsync | copy + fsync {mb / copy_s:,.0f} MiB/s | ≥ 0.5×: {'met' if ratio >= 0.5 else 'NOT met'} |"
    )
    print(f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {settings_database()})")
    shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    main()
