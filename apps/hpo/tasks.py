"""Celery entry points of the study driver (apps/hpo/driver.py): ids in, safe to run twice or at once."""

from __future__ import annotations

from celery import shared_task

from apps.hpo import driver
from apps.hpo.models import Study


@shared_task
def advance_study(study_id: int) -> None:
    driver.advance_study(study_id)


@shared_task
def advance_studies() -> None:
    """The beat's pass over every running study: new intermediate values, ended runs, free slots, deadlines."""
    for study_id in Study.objects.filter(status=Study.Status.RUNNING).values_list("pk", flat=True):
        driver.advance_study(study_id)
