"""The Simplified Chinese catalogues (locale/zh_Hans/LC_MESSAGES): complete, translated, compiled.

A string marked for translation and not in the committed .po fails here: `make messages`, translate the new
entries, commit the .po and .mo files (docs/i18n.md).
"""

from __future__ import annotations

import gettext
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

LOCALE_DIR = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
DOMAINS = ["django", "djangojs"]
# The options of the Makefile's `make messages` (MAKEMESSAGES): keep the two the same.
IGNORED = ["node_modules/*", "var/*", "static/vendor/*", "tests/*", "bench/*"]
MAKEMESSAGES = ["-l", "zh_Hans", "--no-obsolete", "--add-location", "file"]
MAKEMESSAGES += [arg for pattern in IGNORED for arg in ("--ignore", pattern)]
# What makemessages reads (and manage.py with the settings it needs); nothing else is copied.
SOURCES = ["manage.py", "portal", "apps", "templates", "static", "locale"]
ESCAPE = re.compile(r"\\(.)")
ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
PLACEHOLDER = re.compile(r"%\(\w+\)[-#0 +]?\d*(?:\.\d+)?[sdifgrxX]|%%|\{\w*\}")

requires_gettext = pytest.mark.skipif(
    shutil.which("xgettext") is None or shutil.which("msgfmt") is None, reason="GNU gettext is not installed"
)


@dataclass
class Entry:
    msgid: str
    msgctxt: str | None = None
    plural: str | None = None
    strings: dict[int, str] = field(default_factory=dict)  # -1: msgstr, n: msgstr[n]
    flags: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str | None, str]:
        return self.msgctxt, self.msgid


def read_po(path: Path) -> list[Entry]:
    """The entries of a .po file as makemessages writes it (no obsolete entries), the header excluded."""
    entries: list[Entry] = []
    current: Entry | None = None
    target: tuple[str, int] = ("msgid", 0)
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if not line.strip():
            if current is not None and current.msgid:
                entries.append(current)
            current = None
            continue
        current = current or Entry(msgid="")
        if line.startswith("#,"):
            current.flags |= {flag.strip() for flag in line[2:].split(",")}
            continue
        if line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if line.startswith('"'):
            keyword, rest = "", line
        text = ESCAPE.sub(lambda m: ESCAPES.get(m[1], m[1]), rest.strip()[1:-1])
        if keyword:
            match = re.fullmatch(r"msgstr\[(\d+)\]", keyword)
            target = ("msgstr", int(match[1])) if match else (keyword, -1)
        name, index = target
        if name == "msgid":
            current.msgid += text
        elif name == "msgctxt":
            current.msgctxt = (current.msgctxt or "") + text
        elif name == "msgid_plural":
            current.plural = (current.plural or "") + text
        else:
            current.strings[index] = current.strings.get(index, "") + text
    return entries


@pytest.fixture(scope="module")
def fresh_catalogues(tmp_path_factory) -> dict[str, list[Entry]]:
    """makemessages for both domains in a copy of the sources and the committed catalogues."""
    root = tmp_path_factory.mktemp("messages")
    base = Path(settings.BASE_DIR)
    for name in SOURCES:
        source = base / name
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "vendor")
            shutil.copytree(source, root / name, ignore=ignore)
        else:
            shutil.copy2(source, root / name)
    for domain in DOMAINS:
        subprocess.run(
            [sys.executable, "manage.py", "makemessages", "-d", domain, "-v", "0", *MAKEMESSAGES],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            check=True,
            capture_output=True,
        )
    return {domain: read_po(root / "locale" / "zh_Hans" / "LC_MESSAGES" / f"{domain}.po") for domain in DOMAINS}


@pytest.fixture(scope="module")
def committed() -> dict[str, list[Entry]]:
    return {domain: read_po(LOCALE_DIR / f"{domain}.po") for domain in DOMAINS}


def describe(keys) -> str:
    return "\n".join(f"  {context + ' | ' if context else ''}{msgid!r}" for context, msgid in sorted(keys, key=str))


@requires_gettext
@pytest.mark.parametrize("domain", DOMAINS)
def test_every_marked_string_is_in_the_committed_catalogue(fresh_catalogues, committed, domain):
    missing = {e.key for e in fresh_catalogues[domain]} - {e.key for e in committed[domain]}

    assert not missing, f"Not in {domain}.po; run `make messages` and translate:\n{describe(missing)}"


@requires_gettext
@pytest.mark.parametrize("domain", DOMAINS)
def test_the_committed_catalogue_holds_no_string_the_code_dropped(fresh_catalogues, committed, domain):
    stale = {e.key for e in committed[domain]} - {e.key for e in fresh_catalogues[domain]}

    assert not stale, f"No longer in the code; run `make messages`:\n{describe(stale)}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_entry_is_translated_and_none_is_fuzzy(committed, domain):
    untranslated = {e.key for e in committed[domain] if not e.strings or not all(e.strings.values())}
    fuzzy = {e.key for e in committed[domain] if "fuzzy" in e.flags}

    assert not untranslated, f"Untranslated in {domain}.po:\n{describe(untranslated)}"
    assert not fuzzy, f"Fuzzy in {domain}.po (check the translation, then drop the flag):\n{describe(fuzzy)}"


@pytest.mark.parametrize("domain", DOMAINS)
def test_translations_keep_the_placeholders(committed, domain):
    broken = [
        (e.msgid, text)
        for e in committed[domain]
        for text in e.strings.values()
        if text and Counter(PLACEHOLDER.findall(e.msgid)) != Counter(PLACEHOLDER.findall(text))
    ]

    assert not broken, "Placeholders differ:\n" + "\n".join(f"  {a!r} -> {b!r}" for a, b in broken)


@pytest.mark.parametrize("domain", DOMAINS)
def test_the_committed_mo_file_answers_every_entry_of_the_po_file(committed, domain):
    with (LOCALE_DIR / f"{domain}.mo").open("rb") as mo:
        catalogue = gettext.GNUTranslations(mo)
    wrong = []
    for e in committed[domain]:
        if not all(e.strings.values()):
            continue  # untranslated: test_every_entry_is_translated_and_none_is_fuzzy says so
        if e.plural is not None:
            got = (
                catalogue.npgettext(e.msgctxt, e.msgid, e.plural, 1)
                if e.msgctxt
                else catalogue.ngettext(e.msgid, e.plural, 1)
            )
            expected = e.strings[0]
        else:
            got = catalogue.pgettext(e.msgctxt, e.msgid) if e.msgctxt else catalogue.gettext(e.msgid)
            expected = e.strings[-1]
        if got != expected:
            wrong.append((e.msgid, got, expected))

    assert not wrong, "The .mo file is older than the .po file; run `make compilemessages`:\n" + "\n".join(
        f"  {msgid!r}: {got!r}, not {expected!r}" for msgid, got, expected in wrong[:20]
    )


@requires_gettext
@pytest.mark.parametrize("domain", DOMAINS)
def test_the_committed_mo_file_is_what_msgfmt_compiles(tmp_path, domain):
    compiled = tmp_path / f"{domain}.mo"
    subprocess.run(
        ["msgfmt", "--check-format", "-o", str(compiled), str(LOCALE_DIR / f"{domain}.po")],
        check=True,
        capture_output=True,
    )
    with compiled.open("rb") as fresh, (LOCALE_DIR / f"{domain}.mo").open("rb") as committed_mo:
        # GNUTranslations keeps the parsed catalogue in _catalog: the whole content, header included.
        assert gettext.GNUTranslations(fresh)._catalog == gettext.GNUTranslations(committed_mo)._catalog
