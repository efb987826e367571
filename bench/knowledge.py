"""Knowledge base retrieval: quality on cherche's arxiv_tags next to the published char TF-IDF baseline, ingestion
throughput, and query latency at 100k chunks.

    make knowledge-bench-env            # .venv-bench: the portal's venv + cherche (--no-deps: only its data)
    .venv-bench/bin/python bench/knowledge.py [--chunks 100000] [--queries 200]

Runs `apps.knowledge.retrieval` (the portal's own code) on the data; no Django, no database. Prints a table; the
choice of threshold and index it backs is written in docs/knowledge.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.knowledge import chunking, retrieval
from apps.knowledge.extract import extract


def load_arxiv() -> tuple[list[dict], list[tuple[str, list[dict]]]]:
    from cherche import data

    # The published doctest's setting (cherche/evaluate/evaluate.py): titles as queries, tags' labels as documents.
    return data.arxiv_tags(arxiv_title=True, arxiv_summary=False, comment=False)


def doc_text(doc: dict) -> str:
    return " ".join(str(doc.get(key, "")) for key in ("prefLabel_text", "altLabel_text")).strip()


def metrics(rankings: list[list[int]], golds: list[set[int]]) -> dict[str, float]:
    """cherche's definitions: P@1 over the first candidate, R@5 = found relevant / all relevant, MRR@10."""
    p1 = statistics.mean(1.0 if r[:1] and r[0] in g else 0.0 for r, g in zip(rankings, golds, strict=True))
    r5 = statistics.mean(len(set(r[:5]) & g) / len(g) for r, g in zip(rankings, golds, strict=True))
    mrr = statistics.mean(
        next((1 / (i + 1) for i, d in enumerate(r[:10]) if d in g), 0.0) for r, g in zip(rankings, golds, strict=True)
    )
    return {"P@1": p1, "R@5": r5, "MRR@10": mrr}


def tfidf_baseline(texts: list[str], queries: list[str], k: int = 10) -> list[list[int]]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer="char", ngram_range=(3, 7))
    matrix = vec.fit_transform(texts)
    scores = (vec.transform(queries) @ matrix.T).toarray()
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def quality() -> retrieval.Index:
    docs, query_answers = load_arxiv()
    uri_pos = {d["uri"]: i for i, d in enumerate(docs)}
    texts = [doc_text(d) for d in docs]
    queries = [q for q, _a in query_answers]
    # Relevant tags missing from the documents still count in the recall's denominator, as cherche counts them.
    golds = [{uri_pos.get(a["uri"], -1 - i) for i, a in enumerate(answers)} for _q, answers in query_answers]
    index = retrieval.Index(texts, retrieval.embed(texts))
    rows = {"char TF-IDF 3-7 (baseline)": metrics(tfidf_baseline(texts, queries), golds)}
    best_dense = []
    for mode in ("lexical", "dense", "hybrid"):
        results = [index.search(q, k=10, mode=mode) for q in queries]
        rows[mode] = metrics([[h.position for h in r.hits] for r in results], golds)
        if mode == "hybrid":
            best_dense = [r.best_dense for r in results]
    base = rows["char TF-IDF 3-7 (baseline)"]
    print(f"\n## Retrieval quality: cherche arxiv_tags ({len(docs)} documents, {len(queries)} queries)")
    print(f"{'method':<28} {'P@1':>8} {'R@5':>8} {'MRR@10':>8}   P@1 / baseline")
    for name, m in rows.items():
        print(f"{name:<28} {m['P@1']:>8.2%} {m['R@5']:>8.2%} {m['MRR@10']:>8.4f}   {m['P@1'] / base['P@1']:.2f}×")
    not_found_threshold(index, best_dense)
    return index


# Questions no arxiv tag answers: the "not found" side of the threshold.
OFF_TOPIC = [
    "What is the capital of Peru?",
    "How long should I boil an egg?",
    "When does the bakery open on Sundays?",
    "How do I renew my passport?",
    "Which football team won the league last year?",
    "What is the best way to water tomato plants?",
    "How much does a train ticket to Lyon cost?",
    "Who painted the ceiling of the Sistine Chapel?",
    "How do I fix a flat bicycle tyre?",
    "What time is the dentist appointment?",
    "How many calories are in an apple?",
    "Where can I park near the stadium?",
]


def not_found_threshold(index: retrieval.Index, answerable_best: list[float]) -> None:
    off = [index.search(q, k=5) for q in OFF_TOPIC]
    off_dense = [r.best_dense for r in off]
    t = retrieval.NOT_FOUND_COSINE
    kept = sum(1 for r in answerable_best if r >= t) / len(answerable_best)
    refused = sum(1 for r in off if r.not_found) / len(off)
    print("\n## Not-found decision (best dense cosine of the hybrid search)")
    print(f"answerable arxiv queries: min {min(answerable_best):.3f}  p5 {np.percentile(answerable_best, 5):.3f}")
    print(f"off-topic questions:      max {max(off_dense):.3f}  p95 {np.percentile(off_dense, 95):.3f}")
    print(f"threshold {t:.2f}: answerable kept {kept:.1%}, off-topic answered 'not found' {refused:.1%}")


def ingestion() -> None:
    readme = Path(__file__).resolve().parents[1]
    files = sorted([readme / "README.md", *(readme / "docs").glob("*.md")])
    start = time.perf_counter()
    total = 0
    for path in files:
        pieces = chunking.split(extract("markdown", path.read_bytes()))
        retrieval.embed([p.text for p in pieces])
        total += len(pieces)
    elapsed = time.perf_counter() - start
    print(f"\n## Ingestion (extract + chunk + embed, one process): {len(files)} Markdown files of docs/ and README")
    print(f"{total} chunks in {elapsed:.2f} s = {total / elapsed:.0f} chunks/s")


def latency(n: int, queries: int, hnsw: bool) -> None:
    rng = np.random.default_rng(0)
    docs, query_answers = load_arxiv()
    vocab = " ".join(doc_text(d) + " " + q for d, (q, _a) in zip(docs, query_answers, strict=False)).split()
    texts = [" ".join(rng.choice(vocab, size=60)) for _ in range(n)]
    start = time.perf_counter()
    vectors = retrieval.embed(texts)
    embed_s = time.perf_counter() - start
    asks = [q for q, _a in query_answers][:queries]
    print(f"\n## Query latency at {n} chunks ({len(asks)} queries, k=5; embedding the corpus took {embed_s:.1f} s)")
    print(f"{'dense index':<34} {'build s':>8} {'p50 ms':>8} {'p95 ms':>8}")
    indexes = [("exact (numpy matrix product)", n + 1)] + ([("HNSW (usearch)", 0)] if hnsw else [])
    for label, ann_min in indexes:
        retrieval.ANN_MIN = ann_min
        start = time.perf_counter()
        index = retrieval.Index(texts, vectors)
        build = time.perf_counter() - start
        times = []
        for q in asks:
            t0 = time.perf_counter()
            index.search(q, k=5)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"{label:<34} {build:>8.1f} {np.percentile(times, 50):>8.1f} {np.percentile(times, 95):>8.1f}")
        mask = np.zeros(n, bool)
        mask[: n // 10] = True
        times = []
        for q in asks[:50]:
            t0 = time.perf_counter()
            index.search(q, k=5, mask=mask)
            times.append((time.perf_counter() - t0) * 1000)
        print(
            f"{'  same, filtered to 10%':<34} {'':>8} {np.percentile(times, 50):>8.1f} {np.percentile(times, 95):>8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--hnsw", action="store_true", help="also build and time the usearch HNSW index (slow)")
    args = parser.parse_args()
    quality()
    ingestion()
    latency(args.chunks, args.queries, args.hnsw)


if __name__ == "__main__":
    main()
