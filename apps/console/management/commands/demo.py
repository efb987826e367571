"""`manage.py demo`: an idempotent demo — user `demo`, project `demo` and an example of every feature.

Each app makes its own example objects in `apps/<app>/demo.py` and apps/console/demo.py orders them, so that
the demo always shows the whole product.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext as _

from apps.accounts.models import Notification
from apps.accounts.services import notify
from apps.console import demo as console_demo
from apps.jobs import demo as jobs_demo
from apps.jobs.models import Pipeline
from apps.knowledge import demo as knowledge_demo
from apps.labeling import demo as labeling_demo
from apps.projects import services
from apps.projects.models import Membership, Project, Role
from apps.serving import demo as serving_demo
from apps.serving.services import rollout

logger = logging.getLogger(__name__)

DEMO_MEMBERS = [("ada", "ada@example.com", Role.EDITOR), ("grace", "grace@example.com", Role.VIEWER)]


class Command(BaseCommand):
    help = "Create (or complete) the demo user, project and example objects. Safe to run again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--run",
            action="store_true",
            help=(
                "Also run the iris pipeline headless and print how it went, then iris-automl (AutoML → explain → ONNX "
                "INT8 → serve; when the train environment is built) and the memory hog (which fails on purpose)."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        demo, created, password, project = self._core()
        iris = self._examples(project, demo)
        self._chat(project, demo)
        self._labeling(project, demo)

        self.stdout.write(self.style.SUCCESS(f"Demo ready: project “{project.name}” at /p/{project.slug}/"))
        if created or os.environ.get("DEMO_PASSWORD"):
            shown = "(from DEMO_PASSWORD)" if os.environ.get("DEMO_PASSWORD") else password
            self.stdout.write(f"  Log in as:  demo / {shown}")
            if created and not os.environ.get("DEMO_PASSWORD"):
                self.stdout.write("  This password is shown once. Set a new one with: DEMO_PASSWORD=… make demo")
        else:
            self.stdout.write(
                "  Log in as demo (password printed when it was created; "
                "to set a new one run: DEMO_PASSWORD=… make demo)"
            )
        if options["run"]:
            if iris is None:
                raise CommandError("the iris pipeline could not be made (see the warnings above)")
            self._run(project, demo, iris)

    def _run(self, project: Project, demo: Any, iris: Pipeline) -> None:
        """The iris pipeline, then iris-automl (its tasks need the train environment: skipped, saying so, without
        it), then the memory hog, which fails on purpose: the output shows its diagnosis. Fails when iris or
        iris-automl did not succeed."""
        automl = Pipeline.objects.filter(project=project, name=jobs_demo.AUTOML).first()
        if automl is not None and not os.access(settings.PORTAL_TASK_ENVS["train"], os.X_OK):
            self.stdout.write(
                f"  Not running {jobs_demo.AUTOML}: its explain and ONNX steps need the train environment "
                "(`make train-env`)."
            )
            automl = None
        hog = Pipeline.objects.filter(project=project, name=jobs_demo.MEMORY_HOG).first()
        also = tuple(p for p in (automl, hog) if p is not None)
        runs = jobs_demo.run_headless(iris, demo, self.stdout, also=also, on_pass=rollout.reconcile)
        for run in runs[: 2 if automl is not None else 1]:
            if run.status != "succeeded":
                raise CommandError(f"the {run.pipeline_name} pipeline ended {run.status}: {run.reason}")

    @transaction.atomic
    def _core(self) -> tuple[Any, bool, str | None, Project]:
        """The demo user, its project, members, quota and welcome, repaired as the system: what the demo owns is
        set straight (no acting user's permission check), so a demo user who lost the management of its project, or
        a portal where users may not create projects, does not stop the demo."""
        User = get_user_model()
        demo, created = User.objects.get_or_create(
            username="demo", defaults={"email": "demo@example.com", "first_name": "Demo"}
        )
        password = os.environ.get("DEMO_PASSWORD")
        if created or password:
            password = password or secrets.token_urlsafe(12)
            demo.set_password(password)
            demo.save()
        project = Project.objects.filter(slug="demo").first()
        if project is None:
            project = services.provision_project(
                demo,
                slug="demo",
                name="Demo",
                description="A tour of the portal: members with every role, quotas and API tokens.",
            )
        if not Membership.objects.filter(project=project, user=demo, role=Role.OWNER).exists():
            services.grant_role(project, demo, Role.OWNER)
            logger.warning("demo: the demo user owns the demo project again")
        for username, email, role in DEMO_MEMBERS:
            user, user_created = User.objects.get_or_create(username=username, defaults={"email": email})
            if user_created:
                user.set_unusable_password()  # example colleagues; nobody logs in as them
                user.save(update_fields=["password"])
            if not Membership.objects.filter(project=project, user=user).exists():
                services.grant_role(project, user, role)
        quota = project.quota
        if quota.cpu_cores is None:
            quota.cpu_cores, quota.memory_bytes, quota.gpus = 8, 32 * 2**30, 1
            quota.concurrent_runs, quota.storage_bytes = 4, 50 * 2**30
            quota.save()
        if not Notification.objects.filter(user=demo).exists():
            with translation.override(demo.interface_language):
                welcome = _("Welcome to the portal! Start with the demo project.")
            notify(demo, welcome, f"/p/{project.slug}/")
        return demo, created, password, project

    def _chat(self, project: Project, demo: Any) -> None:
        """The chat model of the demo's knowledge base: an `llm` service, deployed once the agent `make run` starts
        runs. Made by the command only (not by `console_demo.populate`, which tests call with an agent of their
        own): loading a model is a minute of CPU that only a portal someone is about to use needs."""
        try:
            with transaction.atomic():
                service = serving_demo.chat_service(project, demo)
                knowledge_demo.wire_chat(project, service)
        except Exception as exc:  # the portal starts without chat answers
            logger.warning("demo: the chat service could not be made: %s", exc, exc_info=True)
            self.stderr.write(self.style.WARNING(f"Warning: the chat service could not be made: {exc}"))
            return
        if service is None:
            self.stdout.write(
                "  The portal-docs knowledge base answers retrieval only: build the chat model with `make llm-env`."
            )

    def _labeling(self, project: Project, demo: Any) -> None:
        """The digits labeling project with the digits service as its auto-labeler. Made by the command only, as the
        chat service: Label Studio, the web process and the agent start after the demo, so the Label Studio part is
        queued (`apps.labeling.demo.complete`) and made as they come up; LABELING=off leaves it out."""
        try:
            with transaction.atomic():
                service = labeling_demo.populate(project, demo)
        except Exception as exc:  # the portal starts without the labeling example
            logger.warning("demo: the digits labeling project could not be made: %s", exc, exc_info=True)
            self.stderr.write(self.style.WARNING(f"Warning: the digits labeling project could not be made: {exc}"))
            return
        if service is None:
            self.stdout.write("  Labeling is off (LABELING=off): no digits labeling project.")
        elif not labeling_demo.done(project):
            self.stdout.write("  The digits labeling project is made once Label Studio and the digits service are up.")

    def _examples(self, project: Project, demo: Any) -> Pipeline | None:
        """Each example in a savepoint of its own: one that fails is rolled back whole and reported as a warning,
        and the others are still made (a demo problem never blocks the portal). Returns the iris pipeline."""
        made: dict[str, Any] = {}
        for name, make in console_demo.examples():
            try:
                with transaction.atomic():
                    made[name] = make(project, demo)
            except Exception as exc:  # any failure: the portal starts without this example
                logger.warning("demo: the %s example could not be made: %s", name, exc, exc_info=True)
                self.stderr.write(self.style.WARNING(f"Warning: the {name} example could not be made: {exc}"))
        pipeline = made.get("iris pipeline")
        return pipeline if isinstance(pipeline, Pipeline) else None
