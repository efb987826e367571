from django.db import migrations, models


def record_waiting_timeouts(apps, schema_editor):
    """The waiting tasks made before the column get their node's declared timeout from their run's frozen spec (as
    `runstate.declared_timeout` reads it), so that the backfill queue need not read them to know how long they run.
    Other rows keep None: the queue reads only waiting ones."""
    TaskRun = apps.get_model("jobs", "TaskRun")
    tasks = []
    for pk, name, spec in TaskRun.objects.filter(status="waiting").values_list("pk", "node", "run__spec"):
        node = next((n for n in (spec or {}).get("nodes", []) if n.get("name") == name), {})
        timeout = node.get("timeout")
        if type(timeout) is int and timeout > 0:
            tasks.append(TaskRun(pk=pk, timeout=timeout))
    TaskRun.objects.bulk_update(tasks, ["timeout"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_logchunk_fts_sqlite"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskrun",
            name="timeout",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(record_waiting_timeouts, migrations.RunPython.noop),
    ]
