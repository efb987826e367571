from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_taskrun_replicas"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskrun",
            name="ends_by",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
