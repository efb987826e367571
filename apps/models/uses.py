"""Where a model version is in use, and who follows a model's aliases, told by the apps above the registry.

The registry cannot import the apps that use its versions (serving sits above it, docs/architecture.md), so each of
them registers a finder from its `AppConfig.ready()`; the version page lists what the finders return."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from apps.models.models import ModelVersion, RegisteredModel


@dataclass(frozen=True)
class Use:
    """One place that uses a version: what it is (already translated), its name, its page and how it uses it."""

    kind: str
    name: str
    url: str
    role: str = ""


Finder = Callable[[ModelVersion], Iterable[Use]]
AliasFinder = Callable[[RegisteredModel], Iterable[tuple[str, Use]]]
_finders: list[Finder] = []
_alias_finders: list[AliasFinder] = []


def register(finder: Finder) -> None:
    """`finder(version)`: the places that use that version."""
    if finder not in _finders:
        _finders.append(finder)


def register_alias_finder(finder: AliasFinder) -> None:
    """`finder(model)`: (alias, place) for each place that follows an alias of that model."""
    if finder not in _alias_finders:
        _alias_finders.append(finder)


def uses_of(version: ModelVersion) -> list[Use]:
    return [use for finder in _finders for use in finder(version)]


def alias_followers(model: RegisteredModel) -> dict[str, list[Use]]:
    """The places following each alias of `model`, by alias name (one query per finder, not per alias)."""
    followers: dict[str, list[Use]] = {}
    for finder in _alias_finders:
        for alias, use in finder(model):
            followers.setdefault(alias, []).append(use)
    return followers
