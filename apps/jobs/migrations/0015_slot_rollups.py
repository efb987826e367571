"""The overview's roll-ups (`RunSlot`, `TaskUsageSlot`), kept by triggers on the runs and task attempts.

A run counts in the slot (quarter hour, UTC) it was created in under its current status; a task attempt, once it has
ended, in the slot of its end under its failure cause. Every insert, update and delete of jobs_pipelinerun and
jobs_taskrun appends its difference to a delta table (`RunSlotDelta`, `TaskUsageSlotDelta`): a plain INSERT of new
rows, no unique key and no upsert, so a writer never takes a lock another writer holds, whatever the project and the
quarter hour (an `ON CONFLICT DO UPDATE` on shared summary rows made concurrent status changes of one project wait on
each other until commit, and deadlock when two transactions took two such rows in opposite orders). The compaction
(apps/jobs/rollups.py) folds the deltas into the summaries; readers sum both in one statement.

On PostgreSQL the triggers are per statement with transition tables (the house pattern of models.0004): a bulk
`update()`, `bulk_update` or `bulk_create` appends its differences grouped, one row per key whose sum is not zero
(+1 under the new key, -1 under the old; unchanged rows cancel). On SQLite they are per row, under a `WHEN` on the
counted columns: one design for both, so the page and the compaction read the same tables on either database."""

import django.db.models.deletion
from django.db import migrations, models

EPOCH = "TIMESTAMPTZ '1970-01-01 00:00:00+00'"


def pg_slot(column: str) -> str:
    return f"date_bin('15 minutes', {column}, {EPOCH})"


# A number under `key` of a JSON document, as the page summed it before (a number, or a string that reads as one);
# anything else is NULL rather than an error in the writer's statement.
PG_NUMBER = r"""
    CREATE FUNCTION jobs_json_number(doc jsonb, key text) RETURNS double precision
    LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE
            WHEN jsonb_typeof(doc -> key) = 'number' THEN (doc ->> key)::double precision
            WHEN jsonb_typeof(doc -> key) = 'string'
                AND (doc ->> key) ~ '^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$'
                THEN (doc ->> key)::double precision
        END
    $$;
"""


def pg_run_rows(rows: str, sign: int) -> str:
    return f"SELECT project_id, {pg_slot('created_at')} AS slot, status, {sign} AS d FROM {rows}"


def pg_task_rows(rows: str, sign: int) -> str:
    return (
        f"SELECT r.project_id, {pg_slot('t.finished_at')} AS slot, t.failure_cause, {sign} AS d, "
        f"{sign} * coalesce(jobs_json_number(t.usage, 'cpu_seconds'), 0) AS cpu, "
        f"{sign} * coalesce(jobs_json_number(t.resources, 'gpu') * jobs_json_number(t.usage, 'wall_seconds'), 0) "
        f"AS gpu FROM {rows} t JOIN jobs_pipelinerun r ON r.id = t.run_id WHERE t.finished_at IS NOT NULL"
    )


def pg_append_runs(source: str) -> str:
    return f"""
        INSERT INTO jobs_runslotdelta (project_id, slot, status, runs)
        SELECT project_id, slot, status, sum(d) FROM ({source}) AS changes GROUP BY 1, 2, 3 HAVING sum(d) <> 0;
    """


def pg_append_tasks(source: str) -> str:
    return f"""
        INSERT INTO jobs_taskusageslotdelta (project_id, slot, failure_cause, tasks, cpu_seconds, gpu_seconds)
        SELECT project_id, slot, failure_cause, sum(d), sum(cpu), sum(gpu) FROM ({source}) AS changes
        GROUP BY 1, 2, 3 HAVING sum(d) <> 0 OR sum(cpu) <> 0 OR sum(gpu) <> 0;
    """


def pg_trigger(table: str, event: str, body: str, referencing: str) -> tuple[str, str]:
    name = f"{table}_slots_{event.lower()}"
    create = f"""
        CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            {body}
            RETURN NULL;
        END $$;
        CREATE TRIGGER {name} AFTER {event} ON {table}
            REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {name}();
    """
    return create, f"DROP TRIGGER IF EXISTS {name} ON {table}; DROP FUNCTION IF EXISTS {name}();"


def postgresql_sql() -> list[tuple[str, str]]:
    both = "OLD TABLE AS old_rows NEW TABLE AS new_rows"
    runs_changed = f"{pg_run_rows('new_rows', 1)} UNION ALL {pg_run_rows('old_rows', -1)}"
    tasks_changed = f"{pg_task_rows('new_rows', 1)} UNION ALL {pg_task_rows('old_rows', -1)}"
    return [
        (PG_NUMBER, "DROP FUNCTION IF EXISTS jobs_json_number(jsonb, text);"),
        pg_trigger("jobs_pipelinerun", "INSERT", pg_append_runs(pg_run_rows("new_rows", 1)), "NEW TABLE AS new_rows"),
        pg_trigger("jobs_pipelinerun", "UPDATE", pg_append_runs(runs_changed), both),
        pg_trigger("jobs_pipelinerun", "DELETE", pg_append_runs(pg_run_rows("old_rows", -1)), "OLD TABLE AS old_rows"),
        pg_trigger("jobs_taskrun", "INSERT", pg_append_tasks(pg_task_rows("new_rows", 1)), "NEW TABLE AS new_rows"),
        pg_trigger("jobs_taskrun", "UPDATE", pg_append_tasks(tasks_changed), both),
        pg_trigger("jobs_taskrun", "DELETE", pg_append_tasks(pg_task_rows("old_rows", -1)), "OLD TABLE AS old_rows"),
    ]


def sqlite_slot(column: str) -> str:
    """The quarter hour of a stored time, in the text Django stores (`datetime()` reads any form SQLite knows). No
    `strftime('%s')`: Django's cursor would take its `%s` for a parameter."""
    day_hour, minute = f"substr(datetime({column}), 1, 14)", f"CAST(substr(datetime({column}), 15, 2) AS INTEGER)"
    return f"{day_hour} || substr('00153045', {minute} / 15 * 2 + 1, 2) || ':00'"


def sqlite_number(row: str, column: str, key: str) -> str:
    return f"CAST(json_extract({row}.{column}, '$.\"{key}\"') AS REAL)"


def sqlite_usage(row: str) -> str:
    """(cpu, gpu) of a task attempt: the page's former `Cast(KeyTextTransform(…))` sums, NULL counting 0."""
    cpu = f"coalesce({sqlite_number(row, 'usage', 'cpu_seconds')}, 0)"
    gpu = f"coalesce({sqlite_number(row, 'resources', 'gpu')} * {sqlite_number(row, 'usage', 'wall_seconds')}, 0)"
    return cpu, gpu


def sqlite_append_run(row: str, sign: int) -> str:
    return f"""
        INSERT INTO jobs_runslotdelta (project_id, slot, status, runs)
        VALUES ({row}.project_id, {sqlite_slot(f"{row}.created_at")}, {row}.status, {sign});
    """


def sqlite_append_task(row: str, sign: int) -> str:
    cpu, gpu = sqlite_usage(row)
    return f"""
        INSERT INTO jobs_taskusageslotdelta (project_id, slot, failure_cause, tasks, cpu_seconds, gpu_seconds)
        SELECT project_id, {sqlite_slot(f"{row}.finished_at")}, {row}.failure_cause, {sign}, {sign} * {cpu},
            {sign} * {gpu}
            FROM jobs_pipelinerun WHERE id = {row}.run_id AND {row}.finished_at IS NOT NULL;
    """


def sqlite_trigger(table: str, event: str, body: str, when: str = "") -> tuple[str, str]:
    name = f"{table}_slots_{event.split()[0].lower()}"
    create = f"CREATE TRIGGER {name} AFTER {event} ON {table} {when} BEGIN {body} END;"
    return create, f"DROP TRIGGER IF EXISTS {name};"


def changed(columns: tuple[str, ...]) -> str:
    return "WHEN " + " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in columns)


RUN_COLUMNS = ("project_id", "created_at", "status")
TASK_COLUMNS = ("run_id", "finished_at", "failure_cause", "usage", "resources")


def sqlite_sql() -> list[tuple[str, str]]:
    return [
        sqlite_trigger("jobs_pipelinerun", "INSERT", sqlite_append_run("NEW", 1)),
        sqlite_trigger(
            "jobs_pipelinerun",
            f"UPDATE OF {', '.join(RUN_COLUMNS)}",
            sqlite_append_run("OLD", -1) + sqlite_append_run("NEW", 1),
            changed(RUN_COLUMNS),
        ),
        sqlite_trigger("jobs_pipelinerun", "DELETE", sqlite_append_run("OLD", -1)),
        sqlite_trigger("jobs_taskrun", "INSERT", sqlite_append_task("NEW", 1), "WHEN NEW.finished_at IS NOT NULL"),
        sqlite_trigger(
            "jobs_taskrun",
            f"UPDATE OF {', '.join(TASK_COLUMNS)}",
            sqlite_append_task("OLD", -1) + sqlite_append_task("NEW", 1),
            changed(TASK_COLUMNS),
        ),
        sqlite_trigger("jobs_taskrun", "DELETE", sqlite_append_task("OLD", -1), "WHEN OLD.finished_at IS NOT NULL"),
    ]


def backfill_sql(vendor: str) -> list[str]:
    """What the roll-ups hold for the rows stored now, straight into the summaries (all the tables start empty)."""
    if vendor == "postgresql":
        slot, cpu, gpu = (
            pg_slot,
            "jobs_json_number(t.usage, 'cpu_seconds')",
            ("jobs_json_number(t.resources, 'gpu') * jobs_json_number(t.usage, 'wall_seconds')"),
        )
    else:
        slot = sqlite_slot
        cpu, gpu = sqlite_usage("t")
    return [
        "INSERT INTO jobs_runslot (project_id, slot, status, runs) "
        f"SELECT project_id, {slot('created_at')}, status, count(*) FROM jobs_pipelinerun GROUP BY 1, 2, 3",
        "INSERT INTO jobs_taskusageslot (project_id, slot, failure_cause, tasks, cpu_seconds, gpu_seconds) "
        f"SELECT r.project_id, {slot('t.finished_at')}, t.failure_cause, count(*), "
        f"coalesce(sum({cpu}), 0), coalesce(sum({gpu}), 0) "
        "FROM jobs_taskrun t JOIN jobs_pipelinerun r ON r.id = t.run_id WHERE t.finished_at IS NOT NULL "
        "GROUP BY 1, 2, 3",
    ]


def statements(vendor: str) -> list[tuple[str, str]]:
    return {"postgresql": postgresql_sql, "sqlite": sqlite_sql}[vendor]()


def create_triggers(apps, schema_editor):
    """Inside the migration's transaction: the tables locked against writers (PostgreSQL; SQLite's one writer is
    this one), the triggers made and the roll-ups filled from what is stored, so no write falls between the two."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("LOCK TABLE jobs_pipelinerun, jobs_taskrun IN SHARE ROW EXCLUSIVE MODE")
    for create, _drop in statements(vendor):
        schema_editor.execute(create)
    for sql in backfill_sql(vendor):
        schema_editor.execute(sql)


def drop_triggers(apps, schema_editor):
    for _create, drop in reversed(statements(schema_editor.connection.vendor)):
        schema_editor.execute(drop)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0014_taskrun_ends_by"),
        ("projects", "0005_quota_concurrent_tasks"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunSlot",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slot", models.DateTimeField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelling", "Cancelling"),
                            ("cancelled", "Cancelled"),
                        ],
                        max_length=20,
                    ),
                ),
                ("runs", models.IntegerField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="projects.project",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("project", "slot", "status"), name="jobs_runslot_unique")
                ],
            },
        ),
        migrations.CreateModel(
            name="TaskUsageSlot",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slot", models.DateTimeField()),
                ("failure_cause", models.CharField(blank=True, default="", max_length=30)),
                ("tasks", models.IntegerField(default=0)),
                ("cpu_seconds", models.FloatField(default=0)),
                ("gpu_seconds", models.FloatField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="projects.project",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "slot", "failure_cause"), name="jobs_taskusageslot_unique"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RunSlotDelta",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slot", models.DateTimeField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelling", "Cancelling"),
                            ("cancelled", "Cancelled"),
                        ],
                        max_length=20,
                    ),
                ),
                ("runs", models.IntegerField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="projects.project",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["project", "slot"], name="jobs_runslotdelta_project")],
            },
        ),
        migrations.CreateModel(
            name="TaskUsageSlotDelta",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slot", models.DateTimeField()),
                ("failure_cause", models.CharField(blank=True, default="", max_length=30)),
                ("tasks", models.IntegerField(default=0)),
                ("cpu_seconds", models.FloatField(default=0)),
                ("gpu_seconds", models.FloatField(default=0)),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="projects.project",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["project", "slot"], name="jobs_usagedelta_project")],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
