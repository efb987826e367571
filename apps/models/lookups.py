"""`like` and `ilike` lookups: MLflow's LIKE/ILIKE (`%` any run, `_` one character, every other character
itself) in each database's own pattern matcher, which needs no backtracking regular expression.

They were regular expressions (`__regex`), which SQLite evaluates with Python's backtracking `re` in the web
process: a pattern of many `%` then took time polynomial in the value's length, and 5,000 `%` made PostgreSQL's
regex compiler fail with a 500.

PostgreSQL: `LIKE`/`ILIKE … ESCAPE '\\'`. SQLite: its `LIKE` folds ASCII case only and cannot be made
case-sensitive per query, so the case-sensitive form is `GLOB` (`*`, `?`, and `[x]` to quote a character); the
case-insensitive form is `LIKE … ESCAPE '\\'` (ASCII case folding, as SQLite's own).
"""

from __future__ import annotations

from typing import Any

from django.db import NotSupportedError
from django.db.models import CharField, Lookup, TextField


def _like_escaped(pattern: str) -> str:
    return pattern.replace("\\", "\\\\")


def _glob(pattern: str) -> str:
    quoted = {"*": "[*]", "?": "[?]", "[": "[[]", "%": "*", "_": "?"}
    return "".join(quoted.get(char, char) for char in pattern)


class _PatternLookup(Lookup):
    case_sensitive = True

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        if not isinstance(self.rhs, str):
            raise TypeError(f"{self.lookup_name} takes a pattern string")
        lhs, lhs_params = self.process_lhs(compiler, connection)
        if connection.vendor == "postgresql":
            operator = "LIKE" if self.case_sensitive else "ILIKE"
            return f"{lhs} {operator} %s ESCAPE '\\'", [*lhs_params, _like_escaped(self.rhs)]
        if connection.vendor == "sqlite":
            if self.case_sensitive:
                return f"{lhs} GLOB %s", [*lhs_params, _glob(self.rhs)]
            return f"{lhs} LIKE %s ESCAPE '\\'", [*lhs_params, _like_escaped(self.rhs)]
        raise NotSupportedError(f"the {self.lookup_name} lookup supports PostgreSQL and SQLite")


@CharField.register_lookup
@TextField.register_lookup
class Like(_PatternLookup):
    lookup_name = "like"


@CharField.register_lookup
@TextField.register_lookup
class ILike(_PatternLookup):
    lookup_name = "ilike"
    case_sensitive = False
