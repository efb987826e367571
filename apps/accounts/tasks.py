from celery import shared_task

from apps.accounts import services


@shared_task
def purge_expired_tokens() -> int:
    """Daily: forget tokens that expired or were revoked long ago."""
    return services.purge_expired_tokens()
