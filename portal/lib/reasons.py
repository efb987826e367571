"""Reasons in the reader's language, from the English sentences stored for them.

A waiting or failure reason is written by a worker, an agent or a controller, in no one's language, and read later by
people in theirs. So the sentence is stored in English, made from a format registered here ("exited with code
%(code)s"), and `translate` turns it back into that format's translation, with each value translated in turn (a
reason often holds another: "retry 2/3 after 10 s backoff (exited with code 1)"). A sentence no format matches (a
Kubernetes event's message, an exception's text) is shown as it was stored.

Formats are registered by the modules that write them, at import, marked with `gettext_noop` so that makemessages
finds them: `EXITED = reasons.format(gettext_noop("exited with code %(code)s"))`, then `EXITED % {"code": 1}`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.utils.translation import gettext

_formats: dict[str, re.Pattern[str]] = {}
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")
MAX_DEPTH = 4


def format(msgid: str) -> str:
    """Register `msgid` (a format with %(name)s placeholders, or a fixed sentence) as a stored reason's shape."""
    if msgid not in _formats:
        pattern, at = [], 0
        for match in PLACEHOLDER.finditer(msgid):
            pattern.append(re.escape(msgid[at : match.start()]))
            pattern.append(f"(?P<{match.group(1)}>.+?)")
            at = match.end()
        pattern.append(re.escape(msgid[at:]))
        _formats[msgid] = re.compile("".join(pattern), re.DOTALL)
        _ordered.cache_clear()
    return msgid


@lru_cache(maxsize=1)
def _ordered() -> list[tuple[str, re.Pattern[str]]]:
    """Most literal text first: "waiting for a slot — quota %(used)s…" before "waiting for %(need)s — %(why)s"."""
    return sorted(_formats.items(), key=lambda item: -len(PLACEHOLDER.sub("", item[0])))


def translate(text: str, depth: int = 0) -> str:
    """`text` in the active language when a registered format made it, else `text` unchanged."""
    if not text or depth > MAX_DEPTH:
        return text
    for msgid, pattern in _ordered():
        match = pattern.fullmatch(text)
        if match is None:
            continue
        values = {name: translate(value, depth + 1) for name, value in match.groupdict().items()}
        return _fill(gettext(msgid), values) or text
    return text


def _fill(translated: str, values: dict[str, str]) -> str | None:
    """`translated` with its placeholders replaced (None when it names one the stored sentence did not have)."""
    try:
        return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), translated)
    except KeyError:
        return None
