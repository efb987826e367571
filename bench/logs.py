"""Logs: task output → browser through the portal vs the raw Channels pub/sub layer, and keyword search.

a) Live path. A pipeline task prints the lines; the real local agent (`runagent`, a subprocess) reads its
   pipe, stores and publishes the lines; uvicorn serves the portal (a subprocess, one worker); a websocket
   client in another process, signed in as a project member, receives them from `ws/runs/<id>/logs/`.
   Every line carries the time it was printed, so the client measures print-to-browser latency and checks
   that no line is missing or duplicated. Peer: the same lines in 500-line messages through
   `RedisPubSubChannelLayer` on the same Redis to a receiving process (no database, no websocket).
b) Search. 1M stored lines of one run (made by the database on PostgreSQL; with their chunks, as a restore would
   bring them), `search(run, keyword)` (median of 5) vs the plain `icontains` query over the run's lines, at each
   size of the growth curve (--grow, --search-lines).

Prints numbers and ratios; the targets are printed, never asserted.

    .venv/bin/python bench/logs.py [--lines 200000] [--stored 1000000 [--grow N]] [--without-index]
    .venv/bin/python bench/logs.py --search-only --search-lines 1000000,10000000   (b) alone, the growth curve)
    (PostgreSQL and Redis on 127.0.0.1; BENCH_DATABASE_URL / BENCH_REDIS_URL override, sqlite:/// works too)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import itertools
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from _env import PYTHON, ROOT, cpu_seconds, database_cpu_seconds, prepare, start, stop, wait_for

MESSAGE_LINES = 500  # the peer's batch, the same as the LogWriter's
RARE = "OOMKilled"  # 3 of the stored lines; searched for in lower case
RARE_AT = (123_457, 500_001, 987_654)
# The keyword shapes searched: in 3 lines (the index finds them), in 60 % (the first lines hold a page), shorter
# than a trigram (no index can narrow it), in 0.1 % (in most chunks, a page needs ~400k lines).
SHAPES = (("rare", RARE.lower()), ("common", "loss"), ("2 chars", "lr"), ("scattered", "shard 00"))
TRIGRAM_INDEX = "jobs_logchunk_text_trgm"  # migration jobs.0006: PostgreSQL indexes chunks of lines
FTS_TABLE = "jobs_logchunk_fts"  # migration jobs.0017: SQLite indexes the same chunks with FTS5
FTS_TRIGGERS = ("jobs_logchunk_fts_insert", "jobs_logchunk_fts_delete", "jobs_logchunk_fts_update")
COLUMNS = ("id", "task_id", "node", "attempt", "replica", "seq", "ts", "stream", "text")
STORED = ("run_id", *COLUMNS[1:])  # the columns the loader fills


# --- Receivers (run as child processes, so they do not share the GIL with the sender) ------------


class Tally:
    """Lines received: latency from the time printed in the line, duplicates, the receive window."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.seen = bytearray(expect)
        self.received = 0
        self.duplicates = 0
        self.latencies: list[float] = []
        self.first = self.last = 0.0

    @property
    def complete(self) -> bool:
        return self.received - self.duplicates >= self.expect

    def add(self, texts: list[str]) -> None:
        now = time.time()
        self.first = self.first or now
        self.last = now
        for text in texts:
            _word, index, printed = text.split(" ")
            i = int(index)
            self.received += 1
            if self.seen[i]:
                self.duplicates += 1
            self.seen[i] = 1
            self.latencies.append(now - float(printed))

    def report(self) -> dict[str, Any]:
        lat = sorted(self.latencies) or [float("nan")]
        return {
            "received": self.received,
            "duplicates": self.duplicates,
            "missing": self.expect - sum(self.seen),
            "first": self.first,
            "last": self.last,
            "p50": lat[len(lat) // 2],
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max": lat[-1],
        }


async def drain(tally: Tally, next_texts) -> None:
    """Receive until every line is in, then half a second more to catch duplicates; 30 s idle ends it."""
    while not tally.complete:
        try:
            tally.add(await asyncio.wait_for(next_texts(), 30))
        except TimeoutError:
            return
    try:
        while True:
            tally.add(await asyncio.wait_for(next_texts(), 0.5))
    except TimeoutError:
        pass


async def receive_websocket(url: str, cookie: str, origin: str, expect: int) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    tally = Tally(expect)
    headers = {"Cookie": cookie, "Origin": origin}
    async with connect(url, additional_headers=headers, max_size=None, open_timeout=20) as ws:

        async def next_texts() -> list[str]:
            while True:
                message = json.loads(await ws.recv())
                if message["type"] == "lines":
                    return [row[-1] for row in message["rows"]]  # text is the last field of a row

        print("ready", flush=True)  # accepted: the consumer has joined the run's group
        cpu_at_ready = time.process_time()
        await drain(tally, next_texts)
    return {**tally.report(), "cpu": time.process_time() - cpu_at_ready}


async def receive_layer(redis_url: str, prefix: str, group: str, expect: int) -> dict[str, Any]:
    from channels_redis.pubsub import RedisPubSubChannelLayer

    layer = RedisPubSubChannelLayer(hosts=[{"address": redis_url, "socket_timeout": None}], prefix=prefix)
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    await asyncio.sleep(0.2)  # SUBSCRIBE is sent; let Redis process it before the sender starts
    tally = Tally(expect)

    async def next_texts() -> list[str]:
        message = await layer.receive(channel)
        return [line["text"] for line in message["lines"]]  # the peer sends dicts, as the portal did

    print("ready", flush=True)
    await drain(tally, next_texts)
    await layer.flush()
    return tally.report()


def receiver_main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "--receive-websocket":
        url, cookie, origin, expect = args
        result = asyncio.run(receive_websocket(url, cookie, origin, int(expect)))
    else:
        redis_url, prefix, group, expect = args
        result = asyncio.run(receive_layer(redis_url, prefix, group, int(expect)))
    print(json.dumps(result), flush=True)


def start_receiver(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, __file__, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"receiver did not start: {line!r}")
    return proc


def result_of(proc: subprocess.Popen) -> dict[str, Any]:
    out, _err = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


# --- a) live path -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


PRINTER = (
    "import sys, time\n"
    "n = int(sys.argv[1])\n"
    "out = sys.stdout\n"
    "for i in range(n):\n"
    "    out.write(f'line {i} {time.time():.6f}\\n')\n"
    "    if i % 256 == 255:\n"
    "        out.flush()\n"
)


def live_ours(n: int, var, project, owner, member) -> dict[str, Any]:
    """A real task prints `n` lines; the real agent (a `runagent` process) reads, stores and publishes them;
    uvicorn's consumer sends them to a websocket client in a third process."""
    from django.conf import settings
    from django.test import Client

    from apps.jobs import orchestrator
    from apps.jobs.models import JobTemplate, PipelineRun
    from apps.jobs.services import save_pipeline, start_run
    from apps.runtime.local.runtime import live_agents

    JobTemplate.objects.create(
        slug="printer", name="printer", command=["{python}", "-c", PRINTER, str(n)], resources={"cpu": 0}
    )
    pipe = save_pipeline(project, owner, name="live", spec={"nodes": [{"name": "print", "template": "printer"}]})
    client = Client()
    client.force_login(member)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    port = free_port()
    server = start(
        [PYTHON, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "off", "--log-level", "warning"],
        var / "uvicorn.log",
    )  # fmt: skip
    agent = start([PYTHON, "manage.py", "runagent"], var / "agent.log")
    try:
        wait_for(lambda: port_open(port), what="uvicorn")
        wait_for(lambda: live_agents().exists(), what="agent")
        run = start_run(pipe, owner)
        origin = f"http://127.0.0.1:{port}"
        url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/logs/"
        receiver = start_receiver("--receive-websocket", url, cookie, origin, str(n))
        # Read once before and once after, never while the lines flow (that would take CPU from them): the agent
        # and uvicorn live on, exited database backends count through the postmaster, and the client reports its
        # own CPU from the moment it was ready.
        servers = {"agent (+task)": agent, "web (uvicorn)": server}
        before = {name: cpu_seconds(proc) for name, proc in servers.items()} | {"database": database_cpu_seconds()}
        started = time.time()
        orchestrator.advance_run(run.pk)  # dispatch (no Celery worker here: this process is the orchestrator)
        result = result_of(receiver)
        after = {name: cpu_seconds(proc) for name, proc in servers.items()} | {"database": database_cpu_seconds()}
        before["client"], after["client"] = 0.0, result.pop("cpu")
        wait_for(lambda: orchestrator.advance_run(run.pk).is_finished, timeout=120, what="the printing task")
        run = PipelineRun.objects.get(pk=run.pk)
        written = run.finished_at.timestamp()
    finally:
        stop(server, agent)
    cpu = {name: after[name] - before[name] for name in before}
    return {**result, "started": started, "written": written, "status": run.status, "cpu": cpu}


async def peer_send(n: int, layer, group: str) -> None:
    batch: list[dict[str, Any]] = []
    for i in range(n):
        now = datetime.now(UTC)
        text = f"line {i} {time.time():.6f}"
        batch.append(
            {"id": i + 1, "task": 1, "node": "bench", "attempt": 1, "replica": "0", "seq": i + 1,
             "ts": now.isoformat(), "stream": "stdout", "text": text}
        )  # fmt: skip
        if len(batch) == MESSAGE_LINES or i == n - 1:
            await layer.group_send(group, {"type": "log.lines", "lines": batch})
            batch = []


def live_peer(n: int) -> dict[str, Any]:
    from channels_redis.pubsub import RedisPubSubChannelLayer

    redis_url = os.environ["REDIS_URL"]
    prefix, group = f"{os.environ['REDIS_PREFIX']}:peer", "bench.peer"
    receiver = start_receiver("--receive-layer", redis_url, prefix, group, str(n))

    async def send() -> None:
        layer = RedisPubSubChannelLayer(hosts=[{"address": redis_url, "socket_timeout": None}], prefix=prefix)
        await peer_send(n, layer, group)
        await layer.flush()

    started = time.time()
    asyncio.run(send())
    written = time.time()
    return {**result_of(receiver), "started": started, "written": written}


# --- b) search ----------------------------------------------------------------------------------


def line_text(i: int) -> str:
    """Line `i`'s text: training logs whose ids and numbers come from md5(i), so PostgreSQL makes the same lines
    in SQL (`SEED_SQL`): 60 % steps with loss and lr, 30 % loader lines naming a 64-bit shard, 10 % checkpoints, and
    the rare word at RARE_AT."""
    h = hashlib.md5(str(i).encode(), usedforsecurity=False).hexdigest()
    v = int(h[:8], 16)
    if i in RARE_AT:
        return f"worker-{i % 8}: container {h[:12]} {RARE} (exit code 137), restarting"
    kind = i % 10
    if kind < 6:
        lr = (v // 100_000) % 1000
        return (
            f"epoch {i // 50_000} step {i} loss 0.{v % 100_000:05d} lr {lr // 100}.{lr % 100:02d}e-04 "
            f"throughput {800 + v % 400} samples/s"
        )
    if kind < 9:
        return f"DEBUG loader worker-{i % 8}: fetched shard {h[:16]} ({v % 9999 + 1} records)"
    return f"WARNING checkpoint {h[:8]} saved to s3://bench/ckpt/{i}.pt in {v % 990 + 9} ms"


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def stored_lines(n: int, tasks: list, start: int = 0) -> Any:
    """Rows of the stored columns (STORED), lines `start` to `n` of the run, spread over `tasks` in turn."""
    for i in range(start, n):
        task = tasks[i % len(tasks)]
        seq = i // len(tasks) + 1
        yield (task.run_id, task.pk, task.node, 1, "0", seq, T0 + timedelta(milliseconds=i), "stdout", line_text(i))


# `line_text` in SQL, for lines %(start)s to %(end)s - 1: the server makes 10M lines in a minute or two where
# Python would take several to make and send them. md5 as in line_text; v is its first 8 hex digits as a number.
SEED_SQL = """
INSERT INTO jobs_logline (run_id, task_id, node, attempt, replica, seq, ts, stream, text)
SELECT %(run)s, (%(tasks)s::bigint[])[i %% %(n)s + 1], (%(nodes)s::text[])[i %% %(n)s + 1], 1, '0', i / %(n)s + 1,
       %(t0)s::timestamptz + i * interval '1 millisecond', 'stdout',
       CASE
         WHEN i = ANY(%(rare_at)s::bigint[]) THEN
           'worker-' || i %% 8 || ': container ' || left(h, 12) || ' ' || %(rare)s || ' (exit code 137), restarting'
         WHEN i %% 10 < 6 THEN
           'epoch ' || i / 50000 || ' step ' || i || ' loss 0.' || lpad((v %% 100000)::text, 5, '0')
           || ' lr ' || (v / 100000 %% 1000) / 100 || '.' || lpad(((v / 100000 %% 1000) %% 100)::text, 2, '0')
           || 'e-04 throughput ' || 800 + v %% 400 || ' samples/s'
         WHEN i %% 10 < 9 THEN
           'DEBUG loader worker-' || i %% 8 || ': fetched shard ' || left(h, 16) || ' (' || v %% 9999 + 1 || ' records)'
         ELSE
           'WARNING checkpoint ' || left(h, 8) || ' saved to s3://bench/ckpt/' || i || '.pt in '
           || v %% 990 + 9 || ' ms'
       END
FROM (
  SELECT i, h, ('x' || left(h, 8))::bit(32)::bigint AS v
  FROM (SELECT i, md5(i::text) AS h FROM generate_series(%(start)s::bigint, %(end)s::bigint - 1) AS i) AS g
) AS s
ORDER BY i
"""


def text_index_sql() -> list[str]:
    """The statements that (re)create the text index of the chunks (jobs.0006, jobs.0017), as the database holds it."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [TRIGRAM_INDEX])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", [f"{FTS_TABLE}_%"])
        return [row[0] for row in cursor.fetchall()]


def drop_text_index() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")
        else:
            for trigger in FTS_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            cursor.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")


SQLITE_BATCH = 50_000  # rows per executemany


def load(tasks: list, start: int, end: int, index: list[str]) -> tuple[float, float]:
    """Store lines `start` to `end` of the run as a restore would: PostgreSQL makes them in one INSERT … SELECT
    (SEED_SQL) with FK triggers off, SQLite takes them by executemany in batches of SQLITE_BATCH; the chunks (all
    made anew, as jobs.0006 and jobs.0017 make them) and the text index (its SQL in `index`) are built afterwards.
    Returns (seconds to store the lines, seconds to index them)."""
    from django.db import connection, transaction

    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")
        else:
            for trigger in FTS_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    started = time.perf_counter()
    if postgres:
        params = {
            "run": tasks[0].run_id, "tasks": [task.pk for task in tasks], "nodes": [task.node for task in tasks],
            "n": len(tasks), "t0": T0, "rare_at": list(RARE_AT), "rare": RARE, "start": start, "end": end,
        }  # fmt: skip
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")  # the ids are right by construction
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute(SEED_SQL, params)
    else:
        sql = f"INSERT INTO jobs_logline ({', '.join(STORED)}) VALUES ({', '.join(['%s'] * len(STORED))})"
        adapt = connection.ops.adapt_datetimefield_value
        rows = stored_lines(end, tasks, start)
        with transaction.atomic(), connection.cursor() as cursor:
            while batch := [(*row[:6], adapt(row[6]), *row[7:]) for row in itertools.islice(rows, SQLITE_BATCH)]:
                cursor.executemany(sql, batch)
    store_s = time.perf_counter() - started
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # the chunks the agent's indexer writes, made for loaded lines as jobs.0006 (jobs.0017) makes them
        cursor.execute("DELETE FROM jobs_logchunk")
        migration = "0006_logchunk" if postgres else "0017_logchunk_fts_sqlite"
        cursor.execute(importlib.import_module(f"apps.jobs.migrations.{migration}").BACKFILL)
        if postgres and index:
            cursor.execute("SET maintenance_work_mem = '512MB'")
        if not postgres and index:
            cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
        for sql in index:
            cursor.execute(sql)
    index_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_logline, jobs_logchunk" if postgres else "ANALYZE")
    return store_s, index_s


def unindexed(run, q: str, limit: int = 500) -> list[dict[str, Any]]:
    """What `search` ran before it had an index: `icontains` over the run's lines."""
    from apps.jobs.logs import line_dict
    from apps.jobs.models import LogLine

    qs = LogLine.objects.filter(run_id=run.pk, text__icontains=q).order_by("pk")[:limit].values(*COLUMNS)
    return [line_dict(**row) for row in qs]


def timed(func, repeat: int = 5) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--grow", type=int, default=0, help="then grow the stored run to this many lines, search again")
    parser.add_argument(
        "--search-lines",
        type=lambda text: sorted({int(size) for size in text.split(",")}),
        help="the sizes of the growth curve, e.g. 1000000,10000000: search at each (instead of --stored/--grow)",
    )
    parser.add_argument("--search-only", action="store_true", help="b) alone")
    parser.add_argument("--without-index", action="store_true", help="drop the text index first (as before it)")
    args = parser.parse_args()
    var = prepare("logs")
    if args.without_index:
        drop_text_index()
    index = text_index_sql()

    from django.db import connection

    from apps.jobs.logs import search
    from apps.jobs.models import PipelineRun, TaskRun
    from apps.projects.models import Role
    from apps.projects.services import create_project
    from tests.factories import UserFactory, add_member

    owner, member = UserFactory(username="bench-owner"), UserFactory(username="bench-member")
    project = create_project(owner, slug="bench", name="Bench")
    add_member(project, member, Role.VIEWER)

    n = args.lines
    if not args.search_only:
        peer = live_peer(n)
        ours = live_ours(n, var, project, owner, member)

    stored_run = PipelineRun.objects.create(project=project, pipeline_name="stored", number=2)
    tasks = [TaskRun.objects.create(run=stored_run, node=f"shard-{k}") for k in range(4)]
    searched = []  # (lines, seconds to store the new ones, index seconds, [(label, q, ours s, scan s, hits, same)])
    sizes = args.search_lines or ((args.stored, args.grow) if args.grow > args.stored else (args.stored,))
    for size in sizes:
        start = searched[-1][0] if searched else 0
        store_s, index_s = load(tasks, start, size, index)
        print(f"stored lines {start:,}–{size:,} in {store_s:.1f} s, indexed in {index_s:.1f} s", flush=True)
        searches = []
        for label, q in SHAPES:
            ours_s, found = timed(lambda q=q: search(stored_run, q))
            peer_s, expected = timed(lambda q=q: unindexed(stored_run, q))
            searches.append((label, q, ours_s, peer_s, len(found), found == expected))
        searched.append((size, store_s, index_s, searches))

    if not args.search_only:

        def live_row(label: str, r: dict[str, Any]) -> tuple:
            lines_s = n / (r["last"] - r["started"])
            return label, lines_s, r["p50"] * 1000, r["p99"] * 1000, r["missing"], r["duplicates"]

        rows = [live_row("portal (task → agent → ws)", ours), live_row("peer (pub/sub layer)", peer)]
        print(f"\na) live: {n:,} lines printed by a task, {connection.vendor} + Redis, 2 cores (run {ours['status']})")
        print("{:<36}{:>12}{:>11}{:>11}{:>9}{:>7}".format("path", "lines/s", "p50 ms", "p99 ms", "missing", "dups"))
        for label, lines_s, p50, p99, missing, dups in rows:
            print(f"{label:<36}{lines_s:>12,.0f}{p50:>11.1f}{p99:>11.1f}{missing:>9}{dups:>7}")
        (_, o_rate, _, o_p99, *_), (_, p_rate, _, p_p99, *_) = rows
        print(f"{'ratio ours/peer':<36}{o_rate / p_rate:>11.2f}×{'':>11}{o_p99 / p_p99:>10.1f}×")
        print(f"dispatch to run finished: {ours['written'] - ours['started']:.2f} s")
        print("target: ≥ 250,000 lines/s, p99 < 50 ms, nothing missing or duplicated")
        print("CPU per 1,000 lines (ms): " + ", ".join(f"{k} {v / n * 1e6:.1f}" for k, v in ours["cpu"].items()))

    for (size, store_s, index_s, searches), start in zip(searched, [0, *(row[0] for row in searched)], strict=False):
        built = f", text index built in {index_s:.1f} s" if index else ", no text index"
        print(
            f"\nb) search: {size:,} lines of one run ({size - start:,} stored in {store_s:.1f} s{built}), median of 5"
        )
        header = ("keyword", "q", "search ms", "scan ms", "ratio", "hits", "same")
        print("{:<10}{:<13}{:>11}{:>10}{:>9}{:>7}{:>6}".format(*header))
        for label, q, ours_s, peer_s, hits, same in searches:
            print(
                f"{label:<10}{q!r:<13}{ours_s * 1000:>11.1f}{peer_s * 1000:>10.1f}{ours_s / peer_s:>8.3f}×"
                f"{hits:>7}{'yes' if same else 'NO':>6}"
            )
    print("target: every keyword ≤ 20 ms and never slower than the scan (ratio ≤ 1)")
    for (small, *_, first), (large, *_, second) in itertools.pairwise(searched):
        # time ∝ lines^k: k ≈ 0 is a flat cost per search whatever the run's size, k ≈ 1 is linear (a full scan)
        print(f"growth {small:,} → {large:,} lines (×{large / small:g}), time ×factor and exponent k (time ∝ lines^k):")
        for a, b in zip(first, second, strict=True):
            k, k_scan = (math.log(b[i] / a[i]) / math.log(large / small) for i in (2, 3))
            print(f"  {a[0]:<10} search ×{b[2] / a[2]:.2f} (k {k:+.2f}), scan ×{b[3] / a[3]:.2f} (k {k_scan:+.2f})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("--receive-"):
        receiver_main(sys.argv[1:])
    else:
        main()
