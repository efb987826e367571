"""PostgreSQL's text index of log lines moves from each line to chunks of an attempt's lines (LogChunk, written after
the lines are live: apps/jobs/logindex.py). The trigram index of jobs.0005 is dropped, the stored lines are gathered
into chunks of 1,000 per attempt, and the chunks get a trigram index that also holds the run. Their text is stored
uncompressed (STORAGE EXTERNAL): compressing it would be work on every chunk for a few megabytes per million lines.

Nothing changes on SQLite here: its FTS5 table kept indexing lines (jobs.0002) until jobs.0017 gave it chunks too.
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

text_search = importlib.import_module("apps.jobs.migrations.0002_logline_text_search")

LINE_INDEX = "jobs_logline_text_trgm"
CHUNK_INDEX = "jobs_logchunk_text_trgm"
CHUNK_LINES = 1000

BACKFILL = f"""
INSERT INTO jobs_logchunk (run_id, task_id, first_seq, last_seq, first_id, last_id, text)
SELECT MIN(run_id), task_id, MIN(seq), MAX(seq), MIN(id), MAX(id), lower(string_agg(text, E'\\n' ORDER BY seq))
FROM jobs_logline
GROUP BY task_id, (seq - 1) / {CHUNK_LINES}
"""


def forwards(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobs_logchunk ALTER COLUMN text SET STORAGE EXTERNAL")
        cursor.execute(f"DROP INDEX IF EXISTS {LINE_INDEX}")
        cursor.execute(BACKFILL)
        ops = text_search.opclass(cursor, connection)
        if ops is None:  # jobs.0002 could not install pg_trgm: search reads every chunk of a run
            return
        # With btree_gin the index also holds the run, as `run_id + 0`: one index scan finds a run's chunks with a
        # keyword, and as only search spells that expression, the planner cannot take the run's chunks from another
        # index and read them all (it takes LIKE over a chunk for as cheap as over a line). Without btree_gin it
        # holds the text alone and the run is a filter.
        run = "(run_id + 0), " if text_search.create_extension(connection, cursor, "btree_gin") else ""
        cursor.execute(f"CREATE INDEX {CHUNK_INDEX} ON jobs_logchunk USING gin ({run}text {ops})")


def backwards(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        ops = text_search.opclass(cursor, connection)
        if ops is not None:
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {LINE_INDEX} ON jobs_logline USING gin (text {ops})")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_logline_trigram_on_text")]

    operations = [
        migrations.CreateModel(
            name="LogChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("run_id", models.BigIntegerField()),
                ("first_seq", models.BigIntegerField()),
                ("last_seq", models.BigIntegerField()),
                ("first_id", models.BigIntegerField()),
                ("last_id", models.BigIntegerField()),
                ("text", models.TextField()),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="log_chunks",
                        to="jobs.taskrun",
                    ),
                ),
            ],
            options={
                "ordering": ["task_id", "first_seq"],
                "indexes": [models.Index(fields=["task", "last_seq"], name="jobs_logchu_task_id_c23e51_idx")],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
