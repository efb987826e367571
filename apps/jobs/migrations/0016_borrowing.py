from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0015_slot_rollups"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobtemplate",
            name="preemptible",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "Its tasks may be stopped and requeued (rerun from the start) so that another project gets its "
                    "quota back; in exchange they may use idle capacity above the project's quota."
                ),
                verbose_name="preemptible",
            ),
        ),
        migrations.AddField(
            model_name="taskrun",
            name="borrowed",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="taskrun",
            name="preempted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
