"""Grounded answers from the packaged chat model: prompt designs measured on questions over the demo knowledge base
(the portal's README and docs/), with the portal's own retrieval, prompts and citation check.

    make llm-env
    .venv/bin/python bench/knowledge_answers.py [--url http://127.0.0.1:PORT] [--designs C1-user-600,...]

Starts one `llm` model server on SmolLM2-135M-Instruct (as a replica runs it) unless `--url` names a running one.
For each design (apps/knowledge/prompts.py: how many passages, how long, where, instruction, few-shot, decoding)
and each question it retrieves the passages as the chat does, asks the model, and scores the answer:

- fact: the answer holds the question's key fact (a command, a number, a name: case-insensitive);
- grounded: the portal's citation check (`prompts.cited`) finds the passage that holds the fact;
- model cites: the model's own `[n]` markers name that passage, and no other passage it does not rest on;
- fabricated: the model writes a marker for a passage it was not shown, or one that does not hold the fact.

No Django, no database. docs/knowledge.md has a measured table and the choice it backs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apps.knowledge import chunking, prompts, retrieval  # noqa: E402
from apps.knowledge.extract import extract  # noqa: E402

# (question, the key fact a right answer holds, where it is written)
QUESTIONS = [
    ("How do I run the tests?", "make test", "README.md"),
    ("How do I start the portal?", "make run", "README.md"),
    ("How do I pick another port for the portal?", "PORT=9000", "README.md"),
    ("How do I set my own password for the demo user?", "DEMO_PASSWORD", "README.md"),
    ("Which command builds the llm environment?", "make llm-env", "docs/serving-llm.md"),
    ("Which static embedding model does the knowledge base use?", "wordllama", "docs/knowledge.md"),
    ("How many words does a chunk hold at most?", "120", "docs/knowledge.md"),
    ("How much memory does an llm service need at least?", "1536Mi", "docs/serving-llm.md"),
]
MARKER = re.compile(r"\[(\d{1,2})\]")


def demo_index() -> tuple[retrieval.Index, list[prompts.Source]]:
    sources, texts = [], []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(path.relative_to(ROOT))
        for piece in chunking.split(extract("markdown", path.read_bytes())):
            sources.append(prompts.Source(0, name, " › ".join(piece.heading_path), piece.text))
            texts.append(piece.text)
    return retrieval.Index(texts, retrieval.embed(texts)), sources


def retrieve(index: retrieval.Index, chunks: list[prompts.Source], question: str, k: int = 4) -> list[prompts.Source]:
    hits = index.search(question, k=k).hits
    return [prompts.Source(n, chunks[h.position].document, chunks[h.position].heading, chunks[h.position].text)
            for n, h in enumerate(hits, start=1)]  # fmt: skip


def start_server() -> tuple[subprocess.Popen, str]:
    python = ROOT / ".venv-llm" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: run `make llm-env`")
    command = [str(python), "-m", "apps.serving.modelserver", "--runtime", "llm", "--name", "chat", "--port", "0",
               "--model", "packaged:smollm2", "--threads", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            match = re.search(r"modelserver: serving \S+ .* on (http://[\d.]+:\d+)", line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(600) or not found:
        process.terminate()
        sys.exit("the llm model server did not start")
    return process, found[0]


def ask(url: str, design: prompts.Design, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, float]:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": design.temperature, "seed": 1}
    started = time.monotonic()
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="", help="a running llm model server (default: start one)")
    parser.add_argument("--designs", default=",".join(prompts.DESIGNS), help="comma-separated design names")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--show", action="store_true", help="print every answer")
    args = parser.parse_args()

    index, chunks = demo_index()
    process = None
    url = args.url
    if not url:
        process, url = start_server()
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        retrieved = {q: retrieve(index, chunks, q) for q, _f, _d in QUESTIONS}
        gold_rank = {q: next((s.number for s in retrieved[q] if fact.lower() in s.text.lower()), 0)
                     for q, fact, _d in QUESTIONS}  # fmt: skip
        print(f"{len(chunks)} passages; the fact's passage is retrieved at rank "
              + ", ".join(str(gold_rank[q]) for q, _f, _d in QUESTIONS) + " (0: not in the top 4)")  # fmt: skip
        print("| design | fact | grounded (portal's check) | model cites the right passage | fabricated markers "
              "| s/answer |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for name in args.designs.split(","):
            design = prompts.DESIGNS[name]
            fact_ok = grounded = model_ok = fabricated = 0
            seconds = 0.0
            for question, fact, _doc in QUESTIONS:
                sources = retrieved[question][: design.passages]
                answer, took = ask(url, design, prompts.messages(design, question, sources), args.max_tokens)
                seconds += took
                holds = {s.number for s in sources if fact.lower() in s.text.lower()}
                has_fact = fact.lower() in answer.lower()
                fact_ok += has_fact
                verified = prompts.cited(answer, sources)
                grounded += has_fact and bool(set(verified) & holds)
                markers = {int(m) for m in MARKER.findall(answer)}
                model_ok += has_fact and bool(markers & holds) and markers <= holds
                fabricated += bool(markers - holds)
                if args.show:
                    print(f"  [{name}] {question} -> {answer!r} markers={sorted(markers)} verified={verified} "
                          f"fact-in={sorted(holds)}")  # fmt: skip
            n = len(QUESTIONS)
            counts = [f"{c}/{n}" for c in (fact_ok, grounded, model_ok, fabricated)]
            print("| " + " | ".join([name, *counts, f"{seconds / n:.1f}"]) + " |")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
