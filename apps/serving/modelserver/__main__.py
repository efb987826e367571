"""Command line of the model server: one process (per replica) serving one model over the Open Inference
Protocol v2, or (`--runtime llm`) a chat model over OpenAI's chat completions API (chat.py, docs/serving-llm.md).

    python -m apps.serving.modelserver --name iris --model PATH --port P [--host 127.0.0.1]
        [--version 1] [--max-batch-size 32] [--max-batch-delay-ms 2] [--predict-thread auto|always|never]
        [--workers 1] [--max-body-mb 64]
    python -m apps.serving.modelserver --runtime llm --name chat [--model packaged:smollm2|PATH]
        [--base-model PATH] [--threads 1] [--max-waiting 32] --port P

Prints one line `modelserver: serving NAME (PLATFORM) on http://HOST:PORT …` on stdout once it listens and, with
--workers N, once every worker has loaded the model and serves (--port 0 picks a free port: read it there). Exit
status 3 when the model cannot be loaded (the message on stderr says why, e.g. a framework that is not installed),
2 for a bad command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading

EXIT_LOAD_FAILED = 3
BACKLOG = 2048
# uvicorn's httptools protocol with each response in one write (joined.py: the sandbox's port forward keeps Nagle on).
HTTP = "apps.serving.modelserver.joined:JoinedHttpToolsProtocol"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m apps.serving.modelserver", description=__doc__.split("\n\n")[0])
    p.add_argument("--runtime", choices=("oip", "llm"), default="oip",
                   help="oip: Open Inference Protocol v2 (default); llm: OpenAI's chat completions")  # fmt: skip
    p.add_argument("--name", required=True, help="the model name in /v2/models/{name} (llm: in /v1/models)")
    p.add_argument("--model", default="",
                   help="an MLflow model folder, a model file, or a folder holding one; llm: packaged:smollm2 "
                   "(default), a Hugging Face model folder, a .gguf file, or a PEFT adapter folder")  # fmt: skip
    p.add_argument("--base-model", default="", help="llm: the base model of a PEFT adapter given in --model")
    p.add_argument("--threads", type=int, default=1, help="llm: CPU threads of the forward pass (the replica's CPUs)")
    p.add_argument("--max-waiting", type=int, default=32, help="llm: requests queued before 503 (one generates)")
    p.add_argument("--version", default="1", help="the model version it answers to (default 1)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port (printed on stdout)")
    p.add_argument("--max-batch-size", type=int, default=32, help="most rows in one predict call")
    p.add_argument("--max-batch-delay-ms", type=float, default=2.0,
                   help="under load, how long a batch may wait to fill (a lone request never waits)")  # fmt: skip
    p.add_argument("--predict-thread", choices=("auto", "always", "never"), default="auto",
                   help="predict on a worker thread: auto = unless a full batch takes under 0.1 ms")  # fmt: skip
    p.add_argument("--workers", type=int, default=1, help="processes sharing the port (default 1)")
    p.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body (413 above)")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return p


def bind(host: str, port: int) -> socket.socket:
    """The listening socket. Created with proto=IPPROTO_TCP on purpose: asyncio turns on TCP_NODELAY for an
    accepted connection only when the listener reports that protocol, and a socket bound with proto 0 (what
    uvicorn's own --workers path does, uvicorn#3149) leaves Nagle on: every keep-alive response then waits
    ~40 ms for the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the banner, as the banner says: a client that reads it may connect at once (the
    # connection waits in the backlog until a worker accepts it), never refused.
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def announce_when_started(workers: int, banner: str) -> str:
    """With --workers N: the address each worker tells once it has loaded the model and serves (READY_ENV), and
    a thread that prints the banner when all N have. Each worker loads its own copy of the model; a banner
    printed before would send clients to a server that only part of its workers serve."""
    ready = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ready.bind(("127.0.0.1", 0))

    def wait_then_print() -> None:
        started: set[bytes] = set()
        with ready:
            while len(started) < workers:  # pids: a worker restarted on the way counts once more, not twice
                started.add(ready.recv(64))
        print(banner, flush=True)

    threading.Thread(target=wait_then_print, name="announce", daemon=True).start()
    return "{}:{}".format(*ready.getsockname())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.max_batch_size < 1 or args.max_batch_delay_ms < 0 or args.workers < 1 or args.max_body_mb <= 0:
        parser().error("--max-batch-size and --workers must be ≥ 1, --max-batch-delay-ms ≥ 0, --max-body-mb > 0")
    logging.basicConfig(level=args.log_level.upper(), format="modelserver: %(levelname)s %(message)s")
    if args.runtime == "llm":
        return serve_llm(args)
    if not args.model:
        parser().error("--model is required")
    options = {
        "name": args.name,
        "model": args.model,
        "version": args.version,
        "max_batch_size": args.max_batch_size,
        "max_batch_delay_ms": args.max_batch_delay_ms,
        "predict_thread": args.predict_thread,
        "max_body_mb": args.max_body_mb,
    }
    import uvicorn

    from apps.serving.modelserver.app import CONFIG_ENV, READY_ENV, build
    from apps.serving.modelserver.loading import LoadError

    try:
        app = build(options)  # loaded here even with --workers N: a model that cannot load fails fast
    except LoadError as exc:
        print(f"modelserver: cannot serve {args.model}: {exc}", file=sys.stderr, flush=True)
        return EXIT_LOAD_FAILED
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"modelserver: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    model = app.models[args.name]
    timing = model.calibration["batch_seconds"]
    measured = f"{timing * 1000:.2f} ms per {args.max_batch_size} rows" if timing is not None else "not probed"
    where = "a worker thread" if model.calibration["in_thread"] else "the event loop"
    host, port = sock.getsockname()[:2]
    banner = (
        f"modelserver: serving {args.name} ({model.predictor.platform}) on http://{host}:{port} "
        f"with {args.workers} worker(s); predict on {where} ({measured}); "
        f"batches of up to {args.max_batch_size} rows"
    )
    common = {
        "http": HTTP,
        "loop": "uvloop",
        "lifespan": "on",
        "access_log": False,
        "log_level": args.log_level,
        "server_header": False,
        "date_header": False,
        "backlog": BACKLOG,
        "proxy_headers": False,  # no proxy in front of a replica but the portal router, which adds none
    }
    if args.workers == 1:
        print(banner, flush=True)  # the model is loaded and the socket listens: served as soon as the loop runs
        uvicorn.Server(uvicorn.Config(app, **common)).run(sockets=[sock])
        return 0
    from uvicorn.supervisors import Multiprocess

    os.environ[CONFIG_ENV] = json.dumps(options)
    os.environ[READY_ENV] = announce_when_started(args.workers, banner)
    del app, model  # each worker loads its own copy
    config = uvicorn.Config("apps.serving.modelserver.app:create_app", factory=True, workers=args.workers, **common)
    Multiprocess(config, sockets=[sock]).run()
    return 0


def serve_llm(args: argparse.Namespace) -> int:
    """--runtime llm: one chat model, one process (--workers does not apply: each would hold a copy of the model)."""
    if args.workers != 1 or args.threads < 1 or args.max_waiting < 0:
        parser().error("--runtime llm takes --workers 1, --threads ≥ 1 and --max-waiting ≥ 0")
    import uvicorn

    from apps.serving.modelserver.chat import build
    from apps.serving.modelserver.llm import LoadError

    options = {
        "name": args.name, "model": args.model, "base_model": args.base_model, "version": args.version,
        "threads": args.threads, "max_waiting": args.max_waiting, "max_body_mb": args.max_body_mb,
    }  # fmt: skip
    try:
        app = build(options)
    except LoadError as exc:
        print(f"modelserver: cannot serve {args.model or 'the packaged model'}: {exc}", file=sys.stderr, flush=True)
        return EXIT_LOAD_FAILED
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"modelserver: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    host, port = sock.getsockname()[:2]
    model = app.model
    print(
        f"modelserver: serving {args.name} (llm: {model.spec.describe()}) on http://{host}:{port} with 1 worker(s); "
        f"one generation at a time on {model.threads} thread(s); loaded in {model.load_seconds:.1f} s; "
        f"context {model.context} tokens",
        flush=True,
    )
    config = uvicorn.Config(
        app, http=HTTP, loop="uvloop", lifespan="on", access_log=False, log_level=args.log_level,
        server_header=False, date_header=False, backlog=BACKLOG, proxy_headers=False,
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
