"""MLflow's search grammar for runs and experiments, translated to ORM filters (PostgreSQL and SQLite alike).

    metrics.rmse < 0.5 AND params.model = 'rf' AND tags.`team name` ILIKE '%vision%'
    AND attributes.status IN ('FINISHED', 'RUNNING') AND datasets.name = 'iris'

Clauses are joined with AND. Keys may be quoted with backticks or double quotes. Metrics compare their
latest value numerically; params and tags compare strings (=, !=, LIKE, ILIKE, IN, NOT IN, IS [NOT] NULL).
LIKE is case-sensitive on both databases (`apps.models.lookups`: SQL's own LIKE, never a regular expression).

A filter is any caller's input, read-only tokens included, so its cost is bounded: at most `MAX_CLAUSES`
clauses, `MAX_FILTER_LENGTH` characters and `MAX_LIKE_WILDCARDS` `%` per LIKE pattern (runs of `%` collapse
first), and the SQL grows linearly with the clauses: all clauses on params, tags, metrics and datasets become
one INTERSECT of per-clause `run_id` selects (each planned on its own), where one EXISTS per clause made
PostgreSQL's join planner take 1.8 s at 100 clauses and over 50 s at 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import F, OuterRef, Q, QuerySet, Subquery

from apps.models.errors import InvalidParameter
from apps.models.metrics import decode_offset, encode_token
from apps.models.models import ExperimentTag, LatestMetric, Param, Run, RunInput, RunTag

ENTITY_ALIASES = {
    "metric": "metric",
    "metrics": "metric",
    "param": "param",
    "params": "param",
    "parameter": "param",
    "parameters": "param",
    "tag": "tag",
    "tags": "tag",
    "attribute": "attribute",
    "attributes": "attribute",
    "attr": "attribute",
    "run": "attribute",
    "dataset": "dataset",
    "datasets": "dataset",
}
NUMERIC_COMPARATORS = ("=", "!=", ">", ">=", "<", "<=")
STRING_COMPARATORS = ("=", "!=", "LIKE", "ILIKE", "IN", "NOT IN")
NULL_COMPARATORS = ("IS NULL", "IS NOT NULL")
RUN_STRING_ATTRIBUTES = {
    "run_id": "run_uuid",
    "run_name": "name",
    "status": "status",
    "artifact_uri": "artifact_uri",
    "user_id": "user_id_text",
    "lifecycle_stage": "lifecycle_stage",
}
RUN_NUMERIC_ATTRIBUTES = {"start_time": "start_time", "end_time": "end_time", "created": "start_time"}
DATASET_ATTRIBUTES = {"name": "name", "digest": "digest"}

_COMPARATOR_RE = re.compile(r"\s*(IS\s+NOT\s+NULL|IS\s+NULL|NOT\s+IN|ILIKE|LIKE|IN|!=|<>|>=|<=|=|>|<)", re.IGNORECASE)
_NUMBER_RE = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_AND_RE = re.compile(r"\s*AND\b", re.IGNORECASE)
_PERCENT_RUN_RE = re.compile(r"%{2,}")

# Bounds on one filter (see the module docstring). SQLite refuses compound selects of over 500 terms.
MAX_CLAUSES = 400
MAX_FILTER_LENGTH = 100_000
MAX_LIKE_WILDCARDS = 50


@dataclass(frozen=True)
class Clause:
    entity: str  # metric, param, tag, attribute, dataset
    key: str
    comparator: str
    value: Any  # float, str, list[str] or None


class _Parser:
    def __init__(self, text: str, strings: dict | None = None, numbers: dict | None = None) -> None:
        self.text = text
        self.pos = 0
        self.strings = RUN_STRING_ATTRIBUTES if strings is None else strings
        self.numbers = RUN_NUMERIC_ATTRIBUTES if numbers is None else numbers

    def fail(self, message: str) -> InvalidParameter:
        return InvalidParameter(f"Error on parsing filter '{self.text}': {message}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def quoted(self, quote: str) -> str:
        end = self.pos + 1
        chars = []
        while end < len(self.text):
            char = self.text[end]
            if char == quote:
                if end + 1 < len(self.text) and self.text[end + 1] == quote:  # SQL-style doubled quote
                    chars.append(quote)
                    end += 2
                    continue
                self.pos = end + 1
                return "".join(chars)
            if char == "\\" and end + 1 < len(self.text):
                chars.append(self.text[end + 1])
                end += 2
                continue
            chars.append(char)
            end += 1
        raise self.fail(f"unterminated quote at position {self.pos}")

    def identifier(self) -> tuple[str, str]:
        self.skip_space()
        match = re.compile(r"([A-Za-z_]+)\.").match(self.text, self.pos)
        if not match:
            raise self.fail(
                f"expected an identifier such as metrics.<key>, params.<key>, tags.<key> or attributes.<key> at "
                f"position {self.pos}"
            )
        entity = ENTITY_ALIASES.get(match.group(1).lower())
        if entity is None:
            raise InvalidParameter(
                f"Invalid entity type '{match.group(1)}'. Valid values are {sorted(set(ENTITY_ALIASES.values()))}"
            )
        self.pos = match.end()
        if self.pos < len(self.text) and self.text[self.pos] in '`"':
            key = self.quoted(self.text[self.pos])
        else:
            key_match = re.compile(r"[\w.\-/:]+").match(self.text, self.pos)
            if not key_match:
                raise self.fail(f"missing key after '{match.group(0)}'")
            key = key_match.group(0)
            self.pos = key_match.end()
        return entity, key

    def comparator(self) -> str:
        match = _COMPARATOR_RE.match(self.text, self.pos)
        if not match:
            raise self.fail(f"expected a comparator at position {self.pos}")
        self.pos = match.end()
        comparator = " ".join(match.group(1).upper().split())
        return "!=" if comparator == "<>" else comparator

    def string(self) -> str:
        self.skip_space()
        if self.pos < len(self.text) and self.text[self.pos] in "'\"":
            return self.quoted(self.text[self.pos])
        raise self.fail(f"expected a quoted string at position {self.pos}")

    def number(self) -> float:
        match = _NUMBER_RE.match(self.text, self.pos)
        if not match:
            raise self.fail(f"expected a number at position {self.pos}")
        self.pos = match.end()
        return float(match.group(1))

    def string_list(self) -> list[str]:
        self.skip_space()
        if self.pos >= len(self.text) or self.text[self.pos] != "(":
            raise self.fail("expected a parenthesised list of quoted strings after IN")
        self.pos += 1
        values = []
        while True:
            values.append(self.string())
            self.skip_space()
            if self.pos < len(self.text) and self.text[self.pos] == ",":
                self.pos += 1
                continue
            if self.pos < len(self.text) and self.text[self.pos] == ")":
                self.pos += 1
                return values
            raise self.fail("expected ',' or ')' in the IN list")

    def clauses(self) -> list[Clause]:
        result = []
        while True:
            entity, key = self.identifier()
            comparator = self.comparator()
            result.append(self.value(entity, key, comparator))
            if len(result) > MAX_CLAUSES:
                raise InvalidParameter(f"Invalid filter: more than {MAX_CLAUSES} clauses joined with AND.")
            if self.at_end():
                return result
            match = _AND_RE.match(self.text, self.pos)
            if not match:
                raise self.fail(f"expected AND at position {self.pos} (OR is not supported)")
            self.pos = match.end()

    def value(self, entity: str, key: str, comparator: str) -> Clause:
        numeric = entity == "metric" or (entity == "attribute" and key in self.numbers)
        if entity == "attribute" and key not in self.numbers and key not in self.strings:
            valid = sorted([*self.strings, *self.numbers])
            raise InvalidParameter(f"Invalid attribute key '{key}' specified. Valid keys are '{valid}'")
        if entity == "dataset" and key not in DATASET_ATTRIBUTES:
            raise InvalidParameter(
                f"Invalid dataset key '{key}' specified. Valid keys are '{sorted(DATASET_ATTRIBUTES)}'"
            )
        allowed = NUMERIC_COMPARATORS if numeric else STRING_COMPARATORS
        if entity in ("param", "tag"):
            allowed = allowed + NULL_COMPARATORS
        if comparator not in allowed:
            raise InvalidParameter(
                f"Invalid comparator '{comparator}' not one of '{list(allowed)}' for {entity} '{key}'"
            )
        if comparator in NULL_COMPARATORS:
            return Clause(entity, key, comparator, None)
        if comparator in ("IN", "NOT IN"):
            return Clause(entity, key, comparator, self.string_list())
        if numeric:
            self.skip_space()
            if self.pos < len(self.text) and self.text[self.pos] in "'\"":
                raise self.fail(f"expected a numeric value for {entity} '{key}', got a string")
            return Clause(entity, key, comparator, self.number())
        return Clause(entity, key, comparator, self.string())


def parse_filter(text: str | None, strings: dict | None = None, numbers: dict | None = None) -> list[Clause]:
    if text is None:
        return []
    if not isinstance(text, str):
        raise InvalidParameter(f"Invalid filter {text!r}.")
    if not text.strip():
        return []
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidParameter(f"Invalid filter: longer than {MAX_FILTER_LENGTH} characters.")
    return _Parser(text, strings, numbers).clauses()


def like_pattern(pattern: str) -> str:
    """A LIKE pattern with each run of `%` collapsed (the same matches), refused past `MAX_LIKE_WILDCARDS`."""
    if not isinstance(pattern, str):
        raise InvalidParameter(f"Invalid LIKE pattern {pattern!r}.")
    collapsed = _PERCENT_RUN_RE.sub("%", pattern)
    if collapsed.count("%") > MAX_LIKE_WILDCARDS:
        raise InvalidParameter(
            f"Invalid LIKE pattern: more than {MAX_LIKE_WILDCARDS} '%' wildcards (runs of '%' count once)."
        )
    return collapsed


def value_q(field: str, comparator: str, value: Any) -> Q:
    """A Q comparing `field` (a string or number column) as MLflow compares."""
    if comparator == "=":
        return Q(**{field: value})
    if comparator == "!=":
        return ~Q(**{field: value})
    lookups = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
    if comparator in lookups:
        return Q(**{f"{field}__{lookups[comparator]}": value})
    if comparator == "LIKE":
        return Q(**{f"{field}__like": like_pattern(value)})
    if comparator == "ILIKE":
        return Q(**{f"{field}__ilike": like_pattern(value)})
    if comparator == "IN":
        return Q(**{f"{field}__in": value})
    if comparator == "NOT IN":
        return ~Q(**{f"{field}__in": value})
    raise InvalidParameter(f"Invalid comparator '{comparator}'")


_KEYED_MODELS = {"metric": LatestMetric, "param": Param, "tag": RunTag}


def _clause_run_ids(clause: Clause) -> QuerySet:
    """The ids of the runs that have a row satisfying `clause` (a metric, param, tag or dataset clause)."""
    if clause.entity == "dataset":
        return RunInput.objects.filter(value_q(DATASET_ATTRIBUTES[clause.key], clause.comparator, clause.value))
    rows = _KEYED_MODELS[clause.entity].objects.filter(key=clause.key)
    if clause.comparator == "IS NOT NULL":
        return rows
    if clause.entity == "metric":
        rows = rows.filter(is_nan=False)
    return rows.filter(value_q("value", clause.comparator, clause.value))


def filter_runs(qs: QuerySet[Run], clauses: list[Clause]) -> QuerySet[Run]:
    """`qs` narrowed by every clause, in SQL whose size and planning time grow linearly with the clauses.

    Attribute clauses are plain conditions on the run; the others go through `narrow_by_rows`.
    """
    selects = []
    absent: list[QuerySet] = []
    for clause in clauses:
        if clause.entity == "attribute":
            field = RUN_STRING_ATTRIBUTES.get(clause.key) or RUN_NUMERIC_ATTRIBUTES[clause.key]
            value = int(clause.value) if clause.key in RUN_NUMERIC_ATTRIBUTES else clause.value
            qs = qs.filter(value_q(field, clause.comparator, value))
        elif clause.comparator == "IS NULL":
            absent.append(_KEYED_MODELS[clause.entity].objects.filter(key=clause.key).values("run_id"))
        else:
            selects.append(_clause_run_ids(clause).values("run_id"))
    return narrow_by_rows(qs, selects, absent)


def key_value_rows(model: type, clause: Clause, owner: str) -> QuerySet:
    """`owner` (the id column) of the rows of a key/value `model` (tags) that satisfy a non-IS NULL `clause`."""
    rows = model.objects.filter(key=clause.key)
    if clause.comparator != "IS NOT NULL":
        rows = rows.filter(value_q("value", clause.comparator, clause.value))
    return rows.values(owner)


def narrow_by_rows(qs: QuerySet, selects: list[QuerySet], absent: list[QuerySet]) -> QuerySet:
    """`qs` kept to the ids in every one of `selects` and in none of `absent` (single-column selects of ids).

    One `IN (s1 INTERSECT s2 …)` for all the clauses, not one EXISTS (or join) each: each select is planned on
    its own, so the cost grows linearly with the clauses, where PostgreSQL's join planner grew much faster.
    """
    selects = [select.order_by() for select in selects]
    if len(selects) == 1:
        qs = qs.filter(pk__in=selects[0])
    elif selects:
        qs = qs.filter(pk__in=selects[0].intersection(*selects[1:]))
    for select in absent:
        qs = qs.exclude(pk__in=select.order_by())
    return qs


_ORDER_RE = re.compile(r"^\s*(.+?)(?:\s+(ASC|DESC))?\s*$", re.IGNORECASE)


def parse_order_by(item: str) -> tuple[str, str, bool]:
    """("metric"|"param"|"tag"|"attribute", key, ascending) of one order_by clause."""
    if not isinstance(item, str):
        raise InvalidParameter(f"Invalid order_by clause {item!r}.")
    match = _ORDER_RE.match(item)
    if not match or not match.group(1):
        raise InvalidParameter(f"Invalid order_by clause '{item}'.")
    ident = match.group(1).strip()
    ascending = (match.group(2) or "ASC").upper() == "ASC"
    if "." not in ident and ident in (*RUN_STRING_ATTRIBUTES, *RUN_NUMERIC_ATTRIBUTES, "name", "creation_time",
                                      "last_update_time", "experiment_id"):  # fmt: skip
        return "attribute", ident, ascending
    parser = _Parser(ident)
    entity, key = parser.identifier()
    if not parser.at_end():
        raise InvalidParameter(f"Invalid order_by clause '{item}'. Could not be parsed.")
    return entity, key, ascending


def filter_and_order_runs(qs: QuerySet[Run], filter_string: str | None, order_by: list[str] | None) -> QuerySet[Run]:
    """`qs` narrowed by the filter and ordered as search-runs orders (the runs table pages read this too)."""
    qs = filter_runs(qs, parse_filter(filter_string))
    ordering = []
    for index, item in enumerate(order_by or []):
        entity, key, ascending = parse_order_by(item)
        if entity == "attribute":
            field = RUN_STRING_ATTRIBUTES.get(key) or RUN_NUMERIC_ATTRIBUTES.get(key)
            if field is None:
                raise InvalidParameter(f"Invalid order_by attribute '{key}'.")
            expr = F(field)
        elif entity in ("metric", "param", "tag"):
            model = {"metric": LatestMetric, "param": Param, "tag": RunTag}[entity]
            alias = f"_order_{index}"
            qs = qs.annotate(
                **{alias: Subquery(model.objects.filter(run_id=OuterRef("pk"), key=key).values("value")[:1])}
            )
            expr = F(alias)
        else:
            raise InvalidParameter(f"Invalid order_by entity '{entity}'.")
        ordering.append(expr.asc(nulls_last=True) if ascending else expr.desc(nulls_last=True))
    ordering += [F("start_time").desc(), F("run_uuid").asc()]
    return qs.order_by(*ordering)


def search_runs(
    qs: QuerySet[Run],
    *,
    filter_string: str | None,
    order_by: list[str] | None,
    max_results: int,
    page_token: str | None,
    columns: tuple[str, ...] = (),
) -> tuple[list, str]:
    """A page of runs from `qs` (already limited to the caller's experiments) and the next page token.

    With `columns`, the page is tuples of those columns instead of `Run` instances (a page is up to 50,000 runs:
    building the instances cost more than reading the rows)."""
    if not 1 <= max_results <= 50000:
        raise InvalidParameter(
            f"Invalid value {max_results} for parameter 'max_results' supplied. It must be at most 50000."
        )
    qs = filter_and_order_runs(qs, filter_string, order_by)
    if columns:
        qs = qs.values_list(*columns)
    offset = decode_offset(page_token)
    runs = list(qs[offset : offset + max_results + 1])
    token = ""
    if len(runs) > max_results:
        runs = runs[:max_results]
        token = encode_token({"offset": offset + max_results})
    return runs, token


EXPERIMENT_ATTRIBUTES = {"name": "name", "creation_time": "creation_time", "last_update_time": "last_update_time",
                         "experiment_id": "pk"}  # fmt: skip


def filter_experiments(qs: QuerySet, filter_string: str | None, order_by: list[str] | None) -> QuerySet:
    """search-experiments: `name LIKE 'x%'`, `attributes.name = 'x'`, `tags.k = 'v'`; order by attributes."""
    text = (filter_string or "").strip()
    # Bare attribute names (`name LIKE ...`) are allowed for experiments, as in MLflow.
    text = re.sub(r"(?<![\w.`\"])(name|creation_time|last_update_time)(?=\s*(=|!=|<|>|LIKE|ILIKE|IN|NOT))",
                  r"attributes.\1", text, flags=re.IGNORECASE)  # fmt: skip
    strings = {"name": "name"}
    numbers = {k: v for k, v in EXPERIMENT_ATTRIBUTES.items() if k != "name"}
    selects, absent = [], []
    for clause in parse_filter(text, strings, numbers):
        if clause.entity == "tag" and clause.comparator == "IS NULL":
            absent.append(ExperimentTag.objects.filter(key=clause.key).values("experiment_id"))
        elif clause.entity == "tag":
            selects.append(key_value_rows(ExperimentTag, clause, "experiment_id"))
        elif clause.entity == "attribute" and clause.key in EXPERIMENT_ATTRIBUTES:
            value = clause.value if clause.key == "name" else int(clause.value)
            qs = qs.filter(value_q(EXPERIMENT_ATTRIBUTES[clause.key], clause.comparator, value))
        else:
            raise InvalidParameter(f"Invalid filter for experiments: {clause.entity} '{clause.key}'.")
    qs = narrow_by_rows(qs, selects, absent)
    ordering = []
    for item in order_by or []:
        entity, key, ascending = parse_order_by(item)
        if entity != "attribute" or key not in EXPERIMENT_ATTRIBUTES:
            raise InvalidParameter(f"Invalid order_by clause '{item}'.")
        expr = F(EXPERIMENT_ATTRIBUTES[key])
        ordering.append(expr.asc() if ascending else expr.desc())
    return qs.order_by(*ordering, "-creation_time", "-pk")
