"""The keys each experiment's runs logged (`ExperimentKey`), kept by triggers on the key/value tables."""

import django.db.models.deletion
from django.db import migrations, models

# (table, entity): the tables whose inserts record a key. LatestMetric has one row per (run, metric key).
SOURCES = (("models_latestmetric", "metric"), ("models_param", "param"), ("models_runtag", "tag"))


def postgresql_sql(table: str, entity: str) -> tuple[str, str]:
    """One statement-level trigger per table: a bulk insert (log_batch, COPY, an upsert) records its keys in one
    INSERT, in key order so that two writers adding the same new keys never wait on each other crosswise."""
    create = f"""
        CREATE FUNCTION {table}_record_keys() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO models_experimentkey (experiment_id, entity, key)
            SELECT DISTINCT r.experiment_id, '{entity}', n.key
            FROM new_rows n JOIN models_run r ON r.id = n.run_id
            ORDER BY 1, 3
            ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$;
        CREATE TRIGGER {table}_record_keys AFTER INSERT ON {table}
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {table}_record_keys();
    """
    drop = f"DROP TRIGGER IF EXISTS {table}_record_keys ON {table}; DROP FUNCTION IF EXISTS {table}_record_keys();"
    return create, drop


def sqlite_sql(table: str, entity: str) -> tuple[str, str]:
    """SQLite has row triggers only (its writers are serialised: no ordering to care about)."""
    create = f"""
        CREATE TRIGGER {table}_record_keys AFTER INSERT ON {table} BEGIN
            INSERT OR IGNORE INTO models_experimentkey (experiment_id, entity, key)
            SELECT experiment_id, '{entity}', NEW.key FROM models_run WHERE id = NEW.run_id;
        END;
    """
    return create, f"DROP TRIGGER IF EXISTS {table}_record_keys;"


def statements(vendor: str) -> list[tuple[str, str]]:
    maker = {"postgresql": postgresql_sql, "sqlite": sqlite_sql}[vendor]
    return [maker(table, entity) for table, entity in SOURCES]


def create_triggers(apps, schema_editor):
    """Triggers first, then the keys already logged (the backfill skips what a concurrent insert recorded)."""
    vendor = schema_editor.connection.vendor
    for create, _drop in statements(vendor):
        schema_editor.execute(create)
    for table, entity in SOURCES:
        schema_editor.execute(
            f"INSERT INTO models_experimentkey (experiment_id, entity, key) "
            f"SELECT DISTINCT r.experiment_id, '{entity}', t.key FROM {table} t JOIN models_run r ON r.id = t.run_id "
            "WHERE true ON CONFLICT DO NOTHING"
        )


def drop_triggers(apps, schema_editor):
    for _create, drop in statements(schema_editor.connection.vendor):
        schema_editor.execute(drop)


class Migration(migrations.Migration):
    dependencies = [
        ("models", "0003_artifactfile"),
    ]

    operations = [
        migrations.CreateModel(
            name="ExperimentKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "entity",
                    models.CharField(choices=[("metric", "Metric"), ("param", "Param"), ("tag", "Tag")], max_length=6),
                ),
                ("key", models.CharField(max_length=250)),
                (
                    "experiment",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="keys",
                        to="models.experiment",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("experiment", "entity", "key"), name="models_experimentkey_unique")
                ],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
