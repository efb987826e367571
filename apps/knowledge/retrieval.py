"""Hybrid retrieval over one knowledge base's chunks: BM25 (bm25s) and dense (WordLlama static embeddings, loaded
from the files inside its PyPI package — nothing is downloaded), fused by reciprocal rank fusion.

Django-free on purpose: `bench/knowledge.py` measures exactly this code. The services build an `Index` from the
chunk rows (vectors are stored with the rows) and keep it per process until the base's chunks change.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import bm25s
import numpy as np

DIM = 256
RRF_K = 60
# Candidates each retriever contributes to the fusion.
CANDIDATES = 50
# Above this many vectors the dense side searches an HNSW graph (usearch) instead of one exact matrix product;
# docs/knowledge.md has the measurements behind the number.
ANN_MIN = 200_000
# "Not found": nothing retrieved is relevant when the best dense cosine is under this. BM25 does not vote: one
# shared word ("capital", "train") gives any off-topic question a lexical match. Chosen with bench/knowledge.py
# (docs/knowledge.md).
NOT_FOUND_COSINE = 0.30

_load_lock = threading.Lock()
_blas_lock = threading.Lock()
_blas = None


def _one_blas_thread():
    """A matrix-vector product is memory-bound: BLAS's thread pool only adds wake-ups, and on a busy host (load 12 on
    2 cores here) they turned a 2 ms product into 40 ms at p50 (docs/knowledge.md)."""
    global _blas
    with _blas_lock:
        if _blas is None:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


@cache
def _model():
    import wordllama

    with _load_lock:
        return wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True, dim=DIM)


def embed(texts: list[str]) -> np.ndarray:
    """L2-normalised float32 vectors, one row per text."""
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    vectors = np.asarray(_model().embed(texts, norm=True), dtype=np.float32)
    return np.ascontiguousarray(vectors.reshape(len(texts), DIM))


_local = threading.local()


def _stemmer():
    """English Snowball stemmer (PyStemmer), one per thread: its objects are not thread-safe. Stemming lets
    "embeddings" match "embedding" (+2.5 points P@1 for BM25 on the bench)."""
    if not hasattr(_local, "stemmer"):
        import Stemmer

        _local.stemmer = Stemmer.Stemmer("english")
    return _local.stemmer.stemWords


def tokenize(texts: list[str]):
    return bm25s.tokenize(texts, stopwords="en", stemmer=_stemmer(), show_progress=False)


@dataclass
class Hit:
    position: int
    fused: float
    lexical: float | None = None
    lexical_rank: int | None = None
    dense: float | None = None
    dense_rank: int | None = None


@dataclass
class Result:
    hits: list[Hit]
    best_dense: float
    best_lexical: float

    @property
    def not_found(self) -> bool:
        return self.best_dense < NOT_FOUND_COSINE


class Index:
    """BM25 over the chunk texts plus their vectors, searched together."""

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        self.size = len(texts)
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(self.size, DIM)
        self.bm25 = bm25s.BM25()
        if self.size:
            self.bm25.index(tokenize(texts), show_progress=False)
        self.ann = None
        if self.size >= ANN_MIN:
            from usearch.index import Index as UIndex

            self.ann = UIndex(ndim=DIM, metric="ip", dtype="f32")
            self.ann.add(np.arange(self.size), self.vectors, log=False)

    def lexical(self, query: str, k: int, mask: np.ndarray | None = None) -> list[tuple[int, float]]:
        k = min(k, self.size)
        if not k:
            return []
        tokens = tokenize([query])
        if not tokens.vocab or not any(tokens.ids):
            return []
        weight = None if mask is None else mask.astype(np.float32)
        docs, scores = self.bm25.retrieve(tokens, k=k, show_progress=False, n_threads=0, weight_mask=weight)
        return [(int(d), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def dense(self, vector: np.ndarray, k: int, mask: np.ndarray | None = None) -> list[tuple[int, float]]:
        k = min(k, self.size)
        if not k:
            return []
        if self.ann is not None and mask is None:
            matches = self.ann.search(vector, k)
            return [(int(key), float(1 - dist)) for key, dist in zip(matches.keys, matches.distances, strict=True)]
        with _one_blas_thread():
            scores = self.vectors @ vector
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(i), float(scores[i])) for i in top if np.isfinite(scores[i])]

    def search(
        self, query: str, k: int = 10, mask: np.ndarray | None = None, mode: str = "hybrid", vector=None
    ) -> Result:
        """The `k` best chunks; `mask` (bool per chunk) keeps only the chunks a filter allows."""
        lexical = self.lexical(query, CANDIDATES, mask) if mode in ("hybrid", "lexical") else []
        if vector is None and mode in ("hybrid", "dense"):
            vector = embed([query])[0]
        dense = self.dense(vector, CANDIDATES, mask) if mode in ("hybrid", "dense") else []
        hits: dict[int, Hit] = {}
        for rank, (pos, score) in enumerate(lexical, start=1):
            hit = hits.setdefault(pos, Hit(pos, 0.0))
            hit.lexical, hit.lexical_rank = score, rank
            hit.fused += 1 / (RRF_K + rank)
        for rank, (pos, score) in enumerate(dense, start=1):
            hit = hits.setdefault(pos, Hit(pos, 0.0))
            hit.dense, hit.dense_rank = score, rank
            hit.fused += 1 / (RRF_K + rank)
        ranked = sorted(hits.values(), key=lambda h: (-h.fused, h.position))[:k]
        return Result(
            ranked,
            best_dense=dense[0][1] if dense else -1.0,
            best_lexical=lexical[0][1] if lexical else 0.0,
        )
