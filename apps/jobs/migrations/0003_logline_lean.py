"""Log lines without foreign-key constraints or single-column indexes (see LogLine): on PostgreSQL each
stored line queued two constraint checks for the commit and fed two indexes that (run, id) and
(task, seq) make redundant.

SQLite rebuilds the table for this, which drops the FTS triggers of migration 0002: they are made again.
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

text_search = importlib.import_module("apps.jobs.migrations.0002_logline_text_search")


def restore_fts(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        text_search.create_fts(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0002_logline_text_search"),
    ]

    operations = [
        migrations.AlterField(
            model_name="logline",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="log_lines",
                to="jobs.pipelinerun",
            ),
        ),
        migrations.AlterField(
            model_name="logline",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="log_lines",
                to="jobs.taskrun",
            ),
        ),
        migrations.RunPython(restore_fts, migrations.RunPython.noop, elidable=False),
    ]
