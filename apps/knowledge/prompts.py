"""What a chat model is asked, and which passages its answer really rests on (Django-free: bench/knowledge_answers.py
measures the designs here with the portal's own code; docs/knowledge.md has the numbers behind `CHOSEN`).

A small model (SmolLM2-135M-Instruct, the packaged one) follows a passage only when it is alone, right before the
question, after worked examples of the answer's shape; it does not reliably cite it. So the citations of an answer are
not the model's claim: `cited` checks which of the passages the answer's words come from, the model's own `[n]`
markers are dropped from the text (`CitationFilter`), and the portal appends the verified ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

NOT_FOUND = "Not found in the knowledge base."


@dataclass(frozen=True)
class Source:
    """One retrieved passage as the model sees it."""

    number: int
    document: str
    heading: str
    text: str


@dataclass(frozen=True)
class Design:
    """How passages and question are laid out for the model."""

    name: str
    passages: int  # how many of the retrieved passages the model sees
    chars: int  # each cut to this many characters (at a word boundary)
    place: str  # "system": passages in the system message; "user": in the user's message, right before the question
    shots: int = 0  # worked examples (a passage, a question, a short answer quoting it) before the real question
    temperature: float = 0.0
    instruction: str = ""  # what the user's message says after the question ("" = none)


SYSTEM_ALL = (
    "You answer questions using only the numbered passages below, which come from a knowledge base. "
    "Cite the passages you use as [1], [2] right after the sentence they support. "
    f"If the passages do not contain the answer, reply exactly: {NOT_FOUND} Do not use any other knowledge."
)
SYSTEM_SHORT = (
    "You answer questions from the passage you are given, in one sentence, quoting its exact commands and names."
)
ONLY = "Answer using only the passage above, and cite it as [1]."
ONLY_TWO = "Answer using only the passages above; cite them as [1], [2]."

DESIGNS = {
    d.name: d
    for d in [
        # What the portal asked before it was measured: 4 passages of up to 1500 characters in the system message.
        Design("A4-system-t0.2", 4, 1500, "system", temperature=0.2),
        Design("A4-system-greedy", 4, 1500, "system"),
        Design("B2-user-instruction", 2, 600, "user", instruction=ONLY_TWO),
        Design("C1-user-instruction", 1, 600, "user", instruction=ONLY),
        Design("D1-user-1shot", 1, 600, "user", shots=1),
        Design("D1-user-2shot", 1, 600, "user", shots=2),
        Design("D1-user-2shot-300", 1, 300, "user", shots=2),
        Design("D2-user-2shot", 2, 600, "user", shots=2),
    ]
}
CHOSEN = DESIGNS["D1-user-2shot"]

# The worked examples of few-shot designs: made up, about nothing in any knowledge base.
EXAMPLES = [
    (
        "Backups run every night at 02:00. To start one by hand, run `tool backup --now`.",
        "How do I start a backup by hand?",
        "Run `tool backup --now`.",
    ),
    (
        "The cache keeps at most 512 entries; older ones are evicted first.",
        "How many entries does the cache keep?",
        "At most 512 entries.",
    ),
]


def _cut(text: str, chars: int) -> str:
    text = text.strip()
    if len(text) <= chars:
        return text
    return text[:chars].rsplit(None, 1)[0] + " …"


def _user(design: Design, question: str, texts: Sequence[str]) -> str:
    if len(texts) == 1:
        context = "Passage:\n" + _cut(texts[0], design.chars)
    else:
        context = "Passages:\n" + "\n\n".join(f"[{n}] {_cut(t, design.chars)}" for n, t in enumerate(texts, 1))
    text = f"{context}\n\nQuestion: {question}"
    return f"{text}\n{design.instruction}" if design.instruction else text


def messages(design: Design, question: str, sources: Sequence[Source]) -> list[dict[str, str]]:
    """The chat messages of `design` for `question` over the first `design.passages` of `sources`."""
    shown = list(sources)[: design.passages]
    if design.place == "system":
        context = "\n\n".join(
            f"[{s.number}] ({s.document}{' › ' + s.heading if s.heading else ''})\n{_cut(s.text, design.chars)}"
            for s in shown
        )
        return [
            {"role": "system", "content": f"{SYSTEM_ALL}\n\nPassages:\n\n{context}"},
            {"role": "user", "content": question},
        ]
    out = [{"role": "system", "content": SYSTEM_SHORT}]
    for passage, example, reply in EXAMPLES[: design.shots]:
        out += [
            {"role": "user", "content": _user(design, example, [passage])},
            {"role": "assistant", "content": reply},
        ]
    out.append({"role": "user", "content": _user(design, question, [s.text for s in shown])})
    return out


# --- Which passages an answer rests on ------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9][a-z0-9_./=-]*", re.I)
_MARKER = re.compile(r"\s*\[\d{1,2}\]")
_STOP_WORDS = """a an and are as at be by can do does for from has have how i if in into is it its me my no not of on or
so that the their them then there these this to use used using was we what when where which who will with you your
answer passage passages cite cited above question"""
STOP = frozenset(_STOP_WORDS.split())
# An answer rests on a passage when this share of its content words (and at least MIN_SHARED of them) appear in it.
SUPPORT = 0.6
MIN_SHARED = 2


def content_words(text: str) -> list[str]:
    words = (w.strip("./=-_").lower() for w in _WORD.findall(_MARKER.sub(" ", text)))
    return [w for w in words if w and w not in STOP]


def cited(answer: str, sources: Sequence[Source]) -> list[int]:
    """The numbers of the passages the answer's words come from: a passage is cited when at least SUPPORT of the
    answer's content words appear in it (or, for an answer of many words, each passage that holds the most of them
    and at least SUPPORT); nothing when the answer rests on none of them. Never the model's own markers."""
    words = content_words(answer)
    if len(set(words)) < MIN_SHARED or answer.strip() == NOT_FOUND:
        return []
    found: list[tuple[float, int]] = []
    for source in sources:
        vocabulary = set(content_words(source.text))  # not its heading: an answer echoing it rests on nothing
        shared = sum(1 for w in words if w in vocabulary)
        share = shared / len(words)
        if share >= SUPPORT and shared >= MIN_SHARED:
            found.append((share, source.number))
    if not found:
        return []
    best = max(share for share, _n in found)
    return sorted(n for share, n in found if share >= best - 0.1)


class CitationFilter:
    """Drops the model's own `[n]` markers from streamed text (the portal's verified citations replace them),
    holding back a piece that may be the start of one until it is known not to be."""

    _PARTIAL = re.compile(r"\s*\[\d{0,2}$")

    def __init__(self) -> None:
        self.held = ""
        self.text: list[str] = []  # everything passed on, for `cited`

    def feed(self, piece: str) -> str:
        text = _MARKER.sub("", self.held + piece)
        partial = self._PARTIAL.search(text)
        self.held = text[partial.start() :] if partial else ""
        out = text[: partial.start()] if partial else text
        self.text.append(out)
        return out

    def flush(self) -> str:
        out, self.held = self.held, ""
        self.text.append(out)
        return out


def filtered(pieces: Iterable[str], state: CitationFilter) -> Iterator[str]:
    for piece in pieces:
        if out := state.feed(piece):
            yield out
    if out := state.flush():
        yield out


def suffix(numbers: Sequence[int]) -> str:
    """What follows the answer: its verified citations, or a warning that the passages do not support it."""
    if numbers:
        return " " + "".join(f"[{n}]" for n in numbers)
    return "\n\n" + UNSUPPORTED


UNSUPPORTED = "(The passages shown do not support this answer: check them before relying on it.)"
