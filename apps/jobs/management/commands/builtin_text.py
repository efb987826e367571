"""`manage.py builtin_text [--check]`: write apps/jobs/builtin_text.py from fixtures/job_templates.yaml, so that
makemessages finds the built-in templates' names, categories and descriptions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.jobs.builtin import TEXT_MODULE, builtin_text_module


class Command(BaseCommand):
    help = "Regenerate apps/jobs/builtin_text.py (the built-in templates' text for translation) from the fixture."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="only fail if the module is out of date")

    def handle(self, *args: Any, **options: Any) -> None:
        source = builtin_text_module()
        current = TEXT_MODULE.read_text(encoding="utf-8") if TEXT_MODULE.exists() else ""
        if options["check"]:
            if current != source:
                raise CommandError(f"{TEXT_MODULE} is out of date: run `manage.py builtin_text`")
            return
        if current != source:
            TEXT_MODULE.write_text(source, encoding="utf-8")
        self.stdout.write(f"{TEXT_MODULE}: {source.count('pgettext_lazy(')} texts")
