"""SQLite's text index of log lines moves from each line to chunks of an attempt's lines (LogChunk, written after the
lines are live by the agent's indexer: apps/jobs/logindex.py), as PostgreSQL's did in jobs.0006.

The FTS5 table of jobs.0002 indexed every line inside the transaction that stored it, through its triggers on
jobs_logline: the trigrams of each live line were on its critical path (bench/logs.py: 23k lines/s with them, 102k
without). Its table and triggers are dropped, the stored lines are gathered into chunks of 1,000 per attempt (as
jobs.0006 does on PostgreSQL), and an FTS5 trigram table over the chunks' text takes its place, kept by triggers on
jobs_logchunk (a chunk is written once per ~1,000 lines, off the live path).

Where SQLite has no FTS5 trigram tokenizer (built without FTS5, older than 3.34), no chunks are made and search scans,
as it did before. Nothing changes on PostgreSQL.

Django rebuilds a table to alter it, which drops its triggers; search only uses the FTS table while its triggers
exist. A later migration that alters LogChunk should call `create_fts` again (idempotent, ends with a rebuild).
"""

import importlib
import sqlite3

from django.db import DatabaseError, migrations, transaction

text_search = importlib.import_module("apps.jobs.migrations.0002_logline_text_search")

CHUNK_LINES = 1000
FTS_TABLE = "jobs_logchunk_fts"
FTS_TRIGGERS = ("jobs_logchunk_fts_insert", "jobs_logchunk_fts_delete", "jobs_logchunk_fts_update")

FTS_SQL = [
    # External content: the text stays in jobs_logchunk only; the FTS table holds the trigram index.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, content='jobs_logchunk', content_rowid='id', tokenize='trigram')",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[0]} AFTER INSERT ON jobs_logchunk BEGIN
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[1]} AFTER DELETE ON jobs_logchunk BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGERS[2]} AFTER UPDATE ON jobs_logchunk BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')",  # chunks written before this
]

# jobs.0006's BACKFILL in SQLite's words (3.40 has no ORDER BY inside group_concat: the order of the lines inside a
# chunk's text changes what it may match only across the joints, which search rechecks line by line anyway).
BACKFILL = f"""
INSERT INTO jobs_logchunk (run_id, task_id, first_seq, last_seq, first_id, last_id, text)
SELECT MIN(run_id), task_id, MIN(seq), MAX(seq), MIN(id), MAX(id), lower(group_concat(text, char(10)))
FROM (SELECT run_id, task_id, seq, id, text FROM jobs_logline ORDER BY task_id, seq)
GROUP BY task_id, (seq - 1) / {CHUNK_LINES}
"""


def create_fts(schema_editor) -> bool:
    """The chunks' FTS5 table and its triggers; False where SQLite cannot make it."""
    if sqlite3.sqlite_version_info < (3, 34, 0):  # the trigram tokenizer
        return False
    connection = schema_editor.connection
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for sql in FTS_SQL:
                cursor.execute(sql)
    except DatabaseError:  # built without FTS5
        return False
    return True


def drop_line_fts(cursor) -> None:
    for trigger in text_search.FTS_TRIGGERS:
        cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    cursor.execute(f"DROP TABLE IF EXISTS {text_search.FTS_TABLE}")


def forwards(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        drop_line_fts(cursor)
        if not create_fts(schema_editor):
            return
        cursor.execute("DELETE FROM jobs_logchunk")  # none were written on SQLite before; made anew from the lines
        cursor.execute(BACKFILL)


def backwards(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        for trigger in FTS_TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        cursor.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        cursor.execute("DELETE FROM jobs_logchunk")
    text_search.create_fts(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0016_borrowing")]

    operations = [migrations.RunPython(forwards, backwards)]
