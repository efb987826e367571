"""Previews, schemas and statistics of a version's files, streamed with bounded memory.

Tabular files (CSV, TSV, JSONL, Parquet) give their first rows with column types, and per column: count, nulls,
min, max, mean (numeric) and distinct (exact up to DISTINCT_CAP values, then reported as a lower bound); a histogram
of each numeric column (HISTOGRAM_BINS equal bins from min to max, counted over a reservoir sample of SAMPLE_SIZE
values: exact up to that many rows, then an unbiased estimate marked `sampled`) and the most frequent values of the
others (exact while the column has at most TOP_CAP distinct values).
Images give a thumbnail (stored as `thumbs/<sha256>.png` in the datasets storage); text files their first lines.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import posixpath
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from django.utils.translation import gettext as _

from apps.datasets import blobs

PREVIEW_ROWS = 20
DISTINCT_CAP = 10_000
TEXT_BYTES = 64 * 1024
THUMB_SIZE = (160, 160)
MAX_IMAGE_BYTES = 50 * 2**20
MAX_LINE = 16 * 2**20
HISTOGRAM_BINS = 20
SAMPLE_SIZE = 10_000
TOP_VALUES = 10
TOP_CAP = 1_000
TOP_LENGTH = 200  # characters of a value kept for the top values

TABULAR = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
IMAGES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"}
TEXT = {".txt", ".md", ".json", ".yaml", ".yml", ".xml", ".log", ".py", ".toml", ".ini", ".cfg", ".html", ".rst"}


class NoPreview(Exception):
    """The format has no preview (the message says which)."""


def kind_of(path: str) -> str:
    ext = extension(path)
    if ext in TABULAR:
        return "table"
    if ext in IMAGES:
        return "image"
    if ext in TEXT or posixpath.basename(path).upper() in {"README", "LICENSE", "LICENCE"}:
        return "text"
    return "none"


def extension(path: str) -> str:
    return posixpath.splitext(path)[1].lower()


def no_preview_message(path: str) -> str:
    ext = extension(path)
    if ext:
        return _("No preview for %(ext)s files; download the file instead.") % {"ext": ext}
    return _("No preview for files without an extension; download the file instead.")


# --- Column statistics -----------------------------------------------------------------------------


class Column:
    """Running statistics of one column (constant memory except the capped distinct set)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.nulls = 0
        self.numeric = 0
        self.kinds: set[str] = set()
        self.total = 0.0
        self.min: Any = None
        self.max: Any = None
        self.distinct: set[Any] = set()
        self.distinct_capped = False
        self.sample: list[float] = []  # a reservoir sample of the finite numbers (Algorithm R), for the histogram
        self._random = random.Random(0)  # sampling, not secrets; seeded: the same file, the same chart
        self.values: Counter[str] | None = Counter()  # value counts for the top values; None past TOP_CAP distinct

    def add(self, value: Any) -> None:
        self.count += 1
        if value is None or value == "":
            self.nulls += 1
            return
        kind = type_of(value)
        self.kinds.add(kind)
        if kind in ("integer", "float"):
            number = float(value)
            if math.isfinite(number):
                self.numeric += 1
                self.total += number
                if len(self.sample) < SAMPLE_SIZE:
                    self.sample.append(number)
                else:
                    slot = self._random.randrange(self.numeric)
                    if slot < SAMPLE_SIZE:
                        self.sample[slot] = number
            comparable: Any = number
        else:
            comparable = str(value)
            if self.values is not None:
                self.values[comparable[:TOP_LENGTH]] += 1  # bounded keys: 1,000 long lines must not be gigabytes
                if len(self.values) > TOP_CAP:
                    self.values = None
        if self.min is None or _lt(comparable, self.min):
            self.min = comparable
        if self.max is None or _lt(self.max, comparable):
            self.max = comparable
        if not self.distinct_capped:
            # hashes, not values: 10 000 long strings must not become gigabytes
            key = value if isinstance(value, (str, int, float, bool)) else json.dumps(value, sort_keys=True)
            self.distinct.add(hash(key))
            if len(self.distinct) > DISTINCT_CAP:
                self.distinct_capped = True
                self.distinct.clear()

    @property
    def type(self) -> str:
        kinds = self.kinds
        if not kinds:
            return "null"
        if kinds <= {"integer"}:
            return "integer"
        if kinds <= {"integer", "float"}:
            return "float"
        if len(kinds) == 1:
            return next(iter(kinds))
        return "string"

    def result(self) -> dict[str, Any]:
        numeric = self.type in ("integer", "float")
        lo, hi = self.min, self.max
        if numeric and self.type == "integer":
            lo, hi = (int(lo) if lo is not None else None), (int(hi) if hi is not None else None)
        return {
            "name": self.name,
            "type": self.type,
            "count": self.count,
            "nulls": self.nulls,
            "min": lo if numeric or self.type in ("string", "date") else None,
            "max": hi if numeric or self.type in ("string", "date") else None,
            "mean": (self.total / self.numeric) if numeric and self.numeric else None,
            "distinct": DISTINCT_CAP if self.distinct_capped else len(self.distinct),
            "distinct_capped": self.distinct_capped,
            "histogram": self._histogram() if numeric else None,
            "top": self._top() if not numeric else None,
        }

    def _histogram(self) -> dict[str, Any] | None:
        """{"edges": HISTOGRAM_BINS + 1 bin edges, "counts", "sampled"}: counts of the sample, scaled to the column's
        numbers when the sample is not all of them. One bin when every number is the same."""
        if not self.sample:
            return None
        lo, hi = min(self.sample), max(self.sample)
        if self.min is not None and self.max is not None:
            lo, hi = float(self.min), float(self.max)  # the sample may miss the extremes; the bins span them
        bins = HISTOGRAM_BINS if hi > lo else 1
        width = (hi - lo) / bins if hi > lo else 1.0
        counts = [0] * bins
        for number in self.sample:
            counts[min(int((number - lo) / width), bins - 1)] += 1
        sampled = self.numeric > len(self.sample)
        if sampled:
            scale = self.numeric / len(self.sample)
            counts = [round(c * scale) for c in counts]
        edges = [lo + i * width for i in range(bins)] + [hi if hi > lo else lo]
        return {"edges": edges, "counts": counts, "sampled": sampled}

    def _top(self) -> list[list[Any]] | None:
        """The TOP_VALUES most frequent values with their counts (ties by value), or None: too many distinct."""
        if not self.values:
            return None
        return [[value, count] for value, count in sorted(self.values.items(), key=lambda vc: (-vc[1], vc[0]))][
            :TOP_VALUES
        ]


def _lt(a: Any, b: Any) -> bool:
    try:
        return a < b
    except TypeError:
        return str(a) < str(b)


def type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (dict, list)):
        return "object"
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return "boolean"
    try:
        int(text)
        return "integer"
    except ValueError:
        pass
    try:
        float(text)
        return "float"
    except ValueError:
        return "string"


# --- Readers: each yields (columns, row iterator) without loading the file ----------------------------


def _text_lines(sha256: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in blobs.open_chunks(sha256):
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        yield from (line + "\n" for line in lines)
        if len(pending) > MAX_LINE:
            raise ValueError(f"a line longer than {MAX_LINE} characters")
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def _csv_rows(sha256: str, delimiter: str) -> tuple[list[str], Iterator[list[Any]]]:
    reader = csv.reader(_text_lines(sha256), delimiter=delimiter)
    header = next(reader, None) or []
    header = [h.lstrip("\ufeff") for h in header]
    return header, (row for row in reader if row)


def _jsonl_rows(sha256: str) -> tuple[list[str], Iterator[list[Any]]]:
    # Columns are those of the first object (then any new key joins at the end for the rows that follow).
    columns: list[str] = []
    index: dict[str, int] = {}

    def rows() -> Iterator[list[Any]]:
        for line in _text_lines(sha256):
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict):
                obj = {"value": obj}
            for key in obj:
                if key not in index:
                    index[key] = len(columns)
                    columns.append(key)
            yield [obj.get(c) for c in columns]

    return columns, rows()


def _parquet_rows(sha256: str) -> tuple[list[str], Iterator[list[Any]], dict[str, str]]:
    import pyarrow.parquet as pq

    path = blobs.local_path(sha256)
    # S3: Parquet needs random access; read the footer and row groups through a seekable wrapper.
    source: Any = str(path) if path is not None else _SeekableBlob(sha256)
    pf = pq.ParquetFile(source)
    names = pf.schema_arrow.names
    types = {f.name: str(f.type) for f in pf.schema_arrow}

    def rows() -> Iterator[list[Any]]:
        for batch in pf.iter_batches(batch_size=4096):
            cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            yield from (list(r) for r in zip(*cols, strict=True))

    return names, rows(), types


class _SeekableBlob(io.RawIOBase):
    """A read-only, seekable view of a blob in remote storage (ranged reads through storage.open)."""

    def __init__(self, sha256: str) -> None:
        from apps.datasets.models import blob_storage_name

        self._fh = blobs.storage().open(blob_storage_name(sha256), "rb")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def readinto(self, buffer) -> int:
        data = self._fh.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def table_rows(path: str, sha256: str) -> tuple[list[str], Iterator[list[Any]]]:
    """(header, rows) of a table file, streamed (monitoring reads a reference version this way)."""
    fmt = TABULAR[extension(path)]
    if fmt == "parquet":
        header, rows, _types = _parquet_rows(sha256)
        return header, rows
    if fmt == "jsonl":
        return _jsonl_rows(sha256)
    return _csv_rows(sha256, "," if fmt == "csv" else "\t")


def analyze_table(path: str, sha256: str, *, full: bool = True) -> dict[str, Any]:
    """{"columns": [...schema...], "rows": first rows, "row_count", "stats": per column}.

    `full=False` stops after the preview rows (row_count is then None): a quick preview before the analysis.
    """
    fmt = TABULAR[extension(path)]
    arrow_types: dict[str, str] = {}
    if fmt == "parquet":
        header, rows, arrow_types = _parquet_rows(sha256)
    elif fmt == "jsonl":
        header, rows = _jsonl_rows(sha256)
    else:
        header, rows = _csv_rows(sha256, "," if fmt == "csv" else "\t")
    columns: list[Column] = [Column(name) for name in header]
    first: list[list[Any]] = []
    count = 0
    for row in rows:
        while len(columns) < len(row):
            columns.append(Column(header[len(columns)] if len(columns) < len(header) else f"column_{len(columns) + 1}"))
        for i, col in enumerate(columns):
            col.add(row[i] if i < len(row) else None)
        if len(first) < PREVIEW_ROWS:
            first.append([_jsonable(v) for v in row])
        count += 1
        if not full and count >= PREVIEW_ROWS:
            break
    stats = [c.result() for c in columns]
    for s in stats:
        if s["name"] in arrow_types:
            s["type"] = arrow_types[s["name"]]
    return {
        "kind": "table",
        "format": fmt,
        "columns": [{"name": s["name"], "type": s["type"]} for s in stats],
        "rows": first,
        "row_count": count if full else None,
        "stats": stats,
    }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    return str(value)


def preview_text(sha256: str) -> dict[str, Any]:
    data = b""
    for chunk in blobs.open_chunks(sha256, chunk=TEXT_BYTES):
        data += chunk
        if len(data) >= TEXT_BYTES:
            break
    return {
        "kind": "text",
        "text": data[:TEXT_BYTES].decode("utf-8", errors="replace"),
        "truncated": len(data) > TEXT_BYTES,
    }


def thumbnail_name(sha256: str) -> str:
    return f"thumbs/{sha256}.png"


def preview_image(sha256: str, size: int) -> dict[str, Any]:
    from django.core.files.base import ContentFile
    from PIL import Image

    if size > MAX_IMAGE_BYTES:
        return {"kind": "image", "error": _("The image is too large to preview.")}
    path = blobs.local_path(sha256)
    source: Any = str(path) if path is not None else io.BytesIO(b"".join(blobs.open_chunks(sha256)))
    Image.MAX_IMAGE_PIXELS = 80_000_000  # decompression-bomb guard
    with Image.open(source) as img:
        width, height, fmt = img.width, img.height, img.format
        img.thumbnail(THUMB_SIZE)
        out = io.BytesIO()
        img.convert("RGBA" if img.mode in ("RGBA", "LA", "P") else "RGB").save(out, format="PNG")
    st = blobs.storage()
    name = thumbnail_name(sha256)
    if not st.exists(name):
        st.save(name, ContentFile(out.getvalue()))
    return {"kind": "image", "width": width, "height": height, "format": fmt, "thumbnail": True}


def preview_file(path: str, sha256: str, size: int) -> dict[str, Any]:
    """The preview of one file; raises NoPreview for formats we cannot show."""
    kind = kind_of(path)
    if kind == "table":
        result = analyze_table(path, sha256, full=False)
        return {k: result[k] for k in ("kind", "format", "columns", "rows", "row_count")}
    if kind == "image":
        return preview_image(sha256, size)
    if kind == "text":
        return preview_text(sha256)
    raise NoPreview(no_preview_message(path))
