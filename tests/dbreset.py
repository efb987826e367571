"""A faster end for transactional tests on PostgreSQL: empty the tables and put the built-in rows back.

After a transactional test (`transactional_db`, `live_server`, `django_db(transaction=True)`) Django flushes the
database: one TRUNCATE of every table, then the post_migrate signal, whose handlers recreate the rows a migrated
database holds (content types, permissions, the built-in job templates and app-store catalogue). Both are slow:
PostgreSQL's TRUNCATE makes new files for each of ~100 tables and their indexes (~2-3 s on an idle machine), and
the handlers read the fixtures and compare or insert row by row (~1.3 s). Under the load of a full run that was
5-10 s per test, most of the suite's time.

Here the same end state is reached another way. Once per session the rows the handlers make are recorded: in a
transaction that is rolled back, every table is emptied, post_migrate is sent and the tables that then hold rows
are copied out (COPY ... TO STDOUT). After each transactional test every table is emptied with DELETE (cheap on
nearly empty tables, and it takes no exclusive lock), and the recorded rows are copied back in. A test therefore
starts from exactly what a flush gives, whatever the previous test added, changed or deleted, built-in rows
included; only their ids are the same every time (a flush gave new ones).

Used only where it can be: a PostgreSQL database whose foreign keys are all deferrable (Django makes them so), a
test that neither limits the apps (`available_apps`) nor asks for serialized rollback, and post_migrate receivers
that are all known below (each one either makes rows, which the snapshot holds, or clears an in-process cache,
which is cleared after each restore). Anything else ends the way Django ends it; an unknown receiver says so in a
warning, to be sorted into one of the two sets.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

from django.apps import apps
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal
from django.db import connections, transaction
from django.db.models.signals import post_migrate
from django.test import TransactionTestCase

# post_migrate's receivers, by what they do to a flushed database.
ROW_MAKERS = {
    "django.contrib.contenttypes.management.create_contenttypes",
    "django.contrib.auth.management.create_permissions",
    "apps.jobs.apps._load_builtins",
    "apps.appstore.apps._sync_builtin_apps",
}
CACHE_CLEARERS = {
    "guardian.shortcuts.clear_ct_cache",  # guardian's content type per permission (a stale one: MixedContentTypeError)
}


@dataclass(frozen=True)
class Snapshot:
    """What a flushed database holds: (table, COPY text data) for each table with rows."""

    tables: tuple[tuple[str, bytes], ...]


_snapshots: dict[str, Snapshot] = {}
_cache_clearers: list[Callable[..., object]] = []
_django_teardown = TransactionTestCase._fixture_teardown


def install() -> None:
    """Record the flushed state of every PostgreSQL test database and end transactional tests with it."""
    receivers = _post_migrate_receivers()
    unknown = set(receivers) - ROW_MAKERS - CACHE_CLEARERS
    if unknown:
        warnings.warn(
            f"tests/dbreset.py does not know the post_migrate receiver(s) {', '.join(sorted(unknown))}: transactional "
            "tests end with Django's (slow) flush until each is listed in ROW_MAKERS or CACHE_CLEARERS",
            stacklevel=2,
        )
        return
    _cache_clearers[:] = [receiver for name, receiver in receivers.items() if name in CACHE_CLEARERS]
    for alias in connections:
        connection = connections[alias]
        if connection.settings_dict.get("TEST", {}).get("MIRROR"):
            continue
        if connection.vendor == "postgresql" and _all_foreign_keys_deferrable(alias):
            _snapshots[alias] = capture(alias)
    TransactionTestCase._fixture_teardown = _fixture_teardown


def uninstall() -> None:
    TransactionTestCase._fixture_teardown = _django_teardown
    _snapshots.clear()
    _cache_clearers.clear()


def capture(alias: str) -> Snapshot:
    """The rows a flush leaves (those post_migrate makes), taken in a transaction that is rolled back: the database
    the session's first tests see is left as it is."""
    connection = connections[alias]
    with transaction.atomic(using=alias):
        _empty(alias)
        emit_post_migrate_signal(verbosity=0, interactive=False, db=alias)
        tables = []
        with connection.cursor() as cursor:
            for table in _tables(alias):
                with cursor.copy(f"COPY {connection.ops.quote_name(table)} TO STDOUT") as copy:
                    data = b"".join(bytes(block) for block in copy)
                if data:
                    tables.append((table, data))
        transaction.set_rollback(True, using=alias)
    _forget_cached_rows(alias)  # the handlers cached content types whose rows were just rolled back
    return Snapshot(tuple(tables))


def restore(alias: str, snapshot: Snapshot) -> None:
    """Empty every table and copy the recorded rows back, in one transaction (foreign keys are checked at its
    commit, so the order of the tables does not matter)."""
    connection = connections[alias]
    with transaction.atomic(using=alias):
        _empty(alias)
        with connection.cursor() as cursor:
            for table, data in snapshot.tables:
                with cursor.copy(f"COPY {connection.ops.quote_name(table)} FROM STDIN") as copy:
                    copy.write(data)
    _forget_cached_rows(alias)


def _fixture_teardown(self: TransactionTestCase) -> None:
    """TransactionTestCase._fixture_teardown, with the recorded state instead of a flush where there is one."""
    for alias in self._databases_names(include_mirrors=False):
        snapshot = _snapshots.get(alias)
        if snapshot is not None and self.available_apps is None and not self.serialized_rollback:
            restore(alias, snapshot)
            continue
        inhibit_post_migrate = self.available_apps is not None or (
            self.serialized_rollback and hasattr(connections[alias], "_test_serialized_contents")
        )
        call_command(
            "flush",
            verbosity=0,
            interactive=False,
            database=alias,
            reset_sequences=False,
            allow_cascade=self.available_apps is not None,
            inhibit_post_migrate=inhibit_post_migrate,
        )


def _tables(alias: str) -> list[str]:
    """The tables a flush empties (Django's own list: every model's existing table, django_migrations not)."""
    return sorted(connections[alias].introspection.django_table_names(only_existing=True, include_views=False))


def _empty(alias: str) -> None:
    connection = connections[alias]
    statements = [f"DELETE FROM {connection.ops.quote_name(table)}" for table in _tables(alias)]
    if statements:
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED; " + "; ".join(statements))


def _all_foreign_keys_deferrable(alias: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND NOT condeferrable")
        return cursor.fetchone()[0] == 0


def _post_migrate_receivers() -> dict[str, Callable[..., object]]:
    """Every post_migrate receiver, by dotted name, once the apps' management modules are imported (as `flush`
    imports them: some connect receivers there)."""
    found = {}
    for app_config in apps.get_app_configs():
        with contextlib.suppress(ImportError):
            import_module(".management", app_config.name)
    for app_config in apps.get_app_configs():
        for group in post_migrate._live_receivers(app_config):
            for receiver in group:
                found[f"{receiver.__module__}.{receiver.__qualname__}"] = receiver
    return found


def _forget_cached_rows(alias: str) -> None:
    """What post_migrate does to in-process state after a flush: the caches of rows by id are emptied (the
    content types' own, which create_contenttypes empties, and the CACHE_CLEARERS')."""
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
    for clear in _cache_clearers:
        clear(signal=post_migrate, sender=None, using=alias)
