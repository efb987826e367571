from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.accounts.models import ApiToken
from apps.accounts.services import create_token
from apps.projects.models import Project


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (it is shown only once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--project", help="Limit the token to the project with this slug.")
        parser.add_argument("--scope", choices=ApiToken.Scope.values, default=ApiToken.Scope.WRITE)
        parser.add_argument("--days", type=int, help="Expire after N days (default: never).")
        parser.add_argument("--name", default="cli", help="A name to recognise the token by.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"No user named {options['username']!r}.") from None
        project = None
        if options["project"]:
            project = Project.objects.filter(slug=options["project"]).first()
            if project is None:
                raise CommandError(f"No project with slug {options['project']!r}.")
        try:
            _token, raw = create_token(
                user, name=options["name"], project=project, scope=options["scope"], days=options["days"]
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        self.stdout.write(raw)
