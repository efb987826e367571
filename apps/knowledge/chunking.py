"""Heading-aware recursive splitting with overlap.

The text is first cut at its headings into sections (each knows its heading path, "Install › Linux"); each section
is split recursively (paragraph → line → sentence → word) by `semchunk` into passages of at most `size` words with
`overlap` shared between neighbours. Every passage keeps its character offsets into the extracted text and the
page it starts on, for citations.
"""

from __future__ import annotations

from dataclasses import dataclass

import semchunk

from apps.knowledge.extract import Extracted

CHUNK_WORDS = 120
OVERLAP = 0.2


@dataclass(frozen=True)
class Piece:
    text: str
    start: int
    end: int
    page: int | None
    heading_path: tuple[str, ...]


def _words(text: str) -> int:
    return len(text.split())


def sections(extracted: Extracted) -> list[tuple[int, int, tuple[str, ...]]]:
    """(start, end, heading path) of each stretch between two headings; the heading line opens its section."""
    bounds = []
    path: list[tuple[int, str]] = []
    cuts = [(0, None)] + [(offset, (level, title)) for offset, level, title in extracted.headings]
    for i, (offset, heading) in enumerate(cuts):
        if heading is not None:
            level, title = heading
            path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
        end = cuts[i + 1][0] if i + 1 < len(cuts) else len(extracted.text)
        if end > offset:
            bounds.append((offset, end, tuple(t for _lv, t in path)))
    return bounds


def split(extracted: Extracted, size: int = CHUNK_WORDS, overlap: float = OVERLAP) -> list[Piece]:
    chunker = semchunk.chunkerify(_words, chunk_size=size)
    pieces = []
    for start, end, path in sections(extracted):
        section = extracted.text[start:end]
        if not section.strip():
            continue
        texts, offsets = chunker(section, offsets=True, overlap=overlap)
        for text, (a, b) in zip(texts, offsets, strict=True):
            stripped = text.strip()
            if stripped:  # trimmed, the offsets still point at exactly the text
                a += len(text) - len(text.lstrip())
                b = a + len(stripped)
                pieces.append(Piece(stripped, start + a, start + b, extracted.page_at(start + a), path))
    return pieces
