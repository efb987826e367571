from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0018_taskrun_timeout"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="taskrun",
            index=models.Index(
                condition=models.Q(("status", "waiting")), fields=["run"], name="jobs_taskrun_waiting_run"
            ),
        ),
    ]
