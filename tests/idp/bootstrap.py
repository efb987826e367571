"""Prepare the test IdP's database: `python -m tests.idp.bootstrap` (DJANGO_SETTINGS_MODULE=tests.idp.settings,
IDP_DB set): tables, the `code` response type and an RSA signing key."""

import django
from django.core.management import call_command

if __name__ == "__main__":
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    call_command("creatersakey")
