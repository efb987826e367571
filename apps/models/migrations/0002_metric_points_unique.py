"""A metric point is unique per (run, key, step, timestamp, value, is_nan), MLflow's primary key, so a retried
write is stored once. Points stored twice before this are reduced to their first row; the unique index replaces
the history index (same leading columns, so history reads keep their order from it)."""

from django.db import migrations, models

DELETE_DUPLICATES = """
DELETE FROM models_metric WHERE id IN (
    SELECT id FROM (
        SELECT id, ROW_NUMBER() OVER (
            PARTITION BY run_id, key, step, timestamp, value, is_nan ORDER BY id
        ) AS copy
        FROM models_metric
    ) AS ranked
    WHERE copy > 1
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("models", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(DELETE_DUPLICATES, reverse_sql=migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name="metric", name="models_metric_history"),
        migrations.AddConstraint(
            model_name="metric",
            constraint=models.UniqueConstraint(
                fields=("run", "key", "step", "timestamp", "value", "is_nan"), name="models_metric_point_unique"
            ),
        ),
    ]
