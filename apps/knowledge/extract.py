"""From a file's bytes to plain text with its structure: where each page starts and where each heading is.

Offsets are character offsets into the extracted text, which is what chunks record and citations show.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from django.utils.translation import gettext as _

# File name suffix -> Document.Kind value.
SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".csv": "csv",
}


class ExtractError(ValueError):
    """The file cannot be read as its kind; the message is the document's failure reason."""


@dataclass
class Extracted:
    text: str
    headings: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, level 1-6, title)
    pages: list[tuple[int, int]] = field(default_factory=list)  # (offset where the page starts, page number)

    def page_at(self, offset: int) -> int | None:
        page = None
        for start, number in self.pages:
            if start > offset:
                break
            page = number
        return page


def kind_for(name: str) -> str | None:
    lower = name.lower()
    for suffix, kind in SUFFIXES.items():
        if lower.endswith(suffix):
            return kind
    return None


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractError(_("The file is not UTF-8 text (byte %(pos)d).") % {"pos": exc.start}) from None
    if "\x00" in text:
        raise ExtractError(_("The file holds NUL characters: it is binary, not text."))
    return text


_FENCE = re.compile(r"^\s*(```|~~~)")
_ATX = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")


def extract_markdown(data: bytes) -> Extracted:
    text = _decode(data)
    headings = []
    offset = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := _ATX.match(line.rstrip("\r\n"))):
            headings.append((offset, len(m.group(1)), m.group(2).strip()))
        offset += len(line)
    return Extracted(text, headings)


class _HtmlText(HTMLParser):
    SKIP = {"script", "style", "noscript", "template"}
    BLOCK = {"p", "div", "br", "li", "tr", "section", "article", "pre", "table", "ul", "ol", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.length = 0
        self.skip = 0
        self.heading: tuple[int, int] | None = None  # (level, offset)
        self.heading_text: list[str] = []
        self.headings: list[tuple[int, int, str]] = []

    def _add(self, s: str) -> None:
        self.parts.append(s)
        self.length += len(s)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._add("\n\n")
            self.heading = (int(tag[1]), self.length)
            self.heading_text = []
        elif tag in self.BLOCK:
            self._add("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self.heading:
            title = " ".join("".join(self.heading_text).split())
            if title:
                self.headings.append((self.heading[1], self.heading[0], title))
            self.heading = None
            self._add("\n\n")
        elif tag in self.BLOCK:
            self._add("\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.heading is not None:
            self.heading_text.append(data)
        self._add(data)


def extract_html(data: bytes) -> Extracted:
    parser = _HtmlText()
    parser.feed(_decode(data))
    parser.close()
    return Extracted("".join(parser.parts), parser.headings)


def extract_pdf(data: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        texts = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise ExtractError(_("The PDF cannot be read: %(error)s") % {"error": exc}) from None
    parts, pages, offset = [], [], 0
    for number, page_text in enumerate(texts, start=1):
        pages.append((offset, number))
        piece = page_text.replace("\x00", "") + "\n\n"
        parts.append(piece)
        offset += len(piece)
    text = "".join(parts)
    if not text.strip():
        raise ExtractError(_("The PDF has no text layer (scanned pages need OCR, which is not available)."))
    return Extracted(text, [], pages)


def extract_csv(data: bytes) -> Extracted:
    """One line per row, "column: value; …", so that each passage carries its column names."""
    text = _decode(data)
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error as exc:
        raise ExtractError(_("The CSV cannot be parsed: %(error)s") % {"error": exc}) from None
    if not rows:
        raise ExtractError(_("The CSV is empty."))
    header, lines = rows[0], []
    for row in rows[1:]:
        cells = [f"{name}: {value}" for name, value in zip(header, row, strict=False) if value.strip()]
        if cells:
            lines.append("; ".join(cells))
    return Extracted("\n".join(lines) + "\n")


EXTRACTORS = {
    "markdown": extract_markdown,
    "text": lambda data: Extracted(_decode(data)),
    "html": extract_html,
    "pdf": extract_pdf,
    "csv": extract_csv,
}


def extract(kind: str, data: bytes) -> Extracted:
    result = EXTRACTORS[kind](data)
    if not result.text.strip():
        raise ExtractError(_("The file holds no text."))
    return result
