"""A text index for `apps.jobs.logs.search`: pg_trgm GIN on PostgreSQL, an FTS5 trigram table on SQLite.

Both serve a case-insensitive substring search of 3+ characters; `search` keeps its `icontains` filter,
so results do not depend on the index. Neither index is part of the model state: they are vendor-specific
and only `search` reads them. Where the database cannot provide one (pg_trgm unavailable or not allowed,
SQLite without FTS5 or older than 3.34), the migration skips it and search scans as before.

SQLite: Django rebuilds a table to alter it, which drops its triggers; `search` only uses the FTS table
while its triggers exist. A later migration that alters LogLine should run the same SQL again (it is
idempotent and ends with a rebuild of the index).
"""

import sqlite3

from django.db import DatabaseError, migrations, transaction

TRIGRAM_INDEX = "jobs_logline_text_trgm"
FTS_TABLE = "jobs_logline_fts"
FTS_TRIGGERS = ("jobs_logline_fts_insert", "jobs_logline_fts_delete", "jobs_logline_fts_update")

FTS_SQL = [
    # External content: the text stays in jobs_logline only; the FTS table holds the trigram index.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, content='jobs_logline', content_rowid='id', tokenize='trigram')",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[0]} AFTER INSERT ON jobs_logline BEGIN
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[1]} AFTER DELETE ON jobs_logline BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[2]} AFTER UPDATE ON jobs_logline BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')",  # lines stored before this migration
]


def create_extension(connection, cursor, name: str) -> bool:
    """Install a contrib extension if the server has it and lets us; False otherwise."""
    cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", [name])
    if cursor.fetchone() is None:
        return False
    try:
        with transaction.atomic(using=connection.alias):  # a savepoint: a refusal must not end the migration
            cursor.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
    except DatabaseError:  # e.g. not allowed to (pg_trgm and btree_gin are trusted from PostgreSQL 13, not before)
        return False
    return True


def opclass(cursor, connection) -> str | None:
    """pg_trgm's GIN operator class, in the schema the extension lives in; None without pg_trgm."""
    cursor.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
    )
    row = cursor.fetchone()
    return f"{connection.ops.quote_name(row[0])}.gin_trgm_ops" if row else None


def create_trigram_index(schema_editor) -> None:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if not create_extension(connection, cursor, "pg_trgm"):
            return
        # UPPER(text): the very expression `icontains` compares (UPPER(text) LIKE UPPER('%q%')), so the
        # unchanged query uses the index and its results stay exactly those of the scan.
        ops = opclass(cursor, connection)
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON jobs_logline USING gin (UPPER(text) {ops})")


def create_fts(schema_editor) -> None:
    if sqlite3.sqlite_version_info < (3, 34, 0):  # the trigram tokenizer
        return
    connection = schema_editor.connection
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for sql in FTS_SQL:
                cursor.execute(sql)
    except DatabaseError:  # built without FTS5
        return


def forwards(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        create_trigram_index(schema_editor)
    elif vendor == "sqlite":
        create_fts(schema_editor)


def backwards(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")
        elif vendor == "sqlite":
            for trigger in FTS_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            cursor.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
