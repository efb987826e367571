"""factory-boy factories. Projects and memberships go through the services, so grants are real."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from apps.accounts.services import create_token
from apps.projects import services
from apps.projects.models import Membership, Project, Role
from apps.projects.permissions import sync_member_permissions

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class ProjectFactory(factory.Factory):
    """A project created by `owner` through `create_project` (owner membership + quota + grants)."""

    class Meta:
        model = Project

    owner = factory.SubFactory(UserFactory)
    slug = factory.Sequence(lambda n: f"project-{n}")
    name = factory.LazyAttribute(lambda p: p.slug.replace("-", " ").title())
    description = ""

    @classmethod
    def _create(cls, model_class, owner, **kwargs):
        return services.create_project(owner, **kwargs)


def add_member(project: Project, user, role: Role) -> Membership:
    """Put `user` in `project` with `role` (bypassing who-may-invite rules: test setup)."""
    membership, _ = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
    sync_member_permissions(project, user, role)
    return membership


def make_token(user, **kwargs) -> str:
    kwargs.setdefault("name", "test")
    return create_token(user, **kwargs)[1]


PY_TEMPLATE_SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string", "x-portal-type": "text", "description": "Python source to run"}},
    "required": ["code"],
    "additionalProperties": False,
}


def python_template(project=None, slug: str = "py", **fields):
    """A template that runs the Python source given as its `code` argument (in the task's venv)."""
    from apps.jobs.models import JobTemplate

    defaults = {
        "name": "Python snippet",
        "command": ["{python}", "-c", "import sys; exec(sys.argv[2])"],
        "args_schema": PY_TEMPLATE_SCHEMA,
        "resources": {"cpu": 0.1},
    }
    defaults.update(fields)
    template, _ = JobTemplate.objects.update_or_create(project=project, slug=slug, version=1, defaults=defaults)
    return template


def pipeline(project, owner, nodes: list[dict], name: str = "pipe", **spec):
    """A saved, validated pipeline. Nodes default to the `py` template."""
    from apps.jobs.services import save_pipeline

    python_template()
    for node in nodes:
        node.setdefault("template", "py")
    return save_pipeline(project, owner, name=name, spec={"nodes": nodes, **spec})


# --- datasets ---------------------------------------------------------------------------------


def dataset(project, owner=None, name: str = "iris", **fields):
    """A dataset created through the service."""
    from apps.datasets.services import create_dataset

    return create_dataset(project, owner, name=name, **fields)


def dataset_version(ds, files: dict[str, bytes] | None = None, *, user=None, message: str = "", task_run=None):
    """A committed version of `ds` holding `files` ({path: content}); blobs go to the datasets storage."""
    import tempfile
    from pathlib import Path

    from apps.datasets.services import version_from_directory

    files = {"data.csv": b"a,b\n1,x\n2,y\n"} if files is None else files
    with tempfile.TemporaryDirectory() as tmp:
        for path, content in files.items():
            target = Path(tmp) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return version_from_directory(ds, Path(tmp), user=user, message=message, task_run=task_run)


def upload_session(ds, owner=None, **kwargs):
    from apps.datasets.uploads import start_upload

    return start_upload(ds, owner, **kwargs)


# --- Experiment tracking and the model registry (apps.models) ------------------------------------------


def experiment(project, name: str = "exp"):
    """An experiment made through the service (artifact location set, name unique per project)."""
    from apps.models.models import Experiment
    from apps.models.services import create_experiment

    return Experiment.objects.filter(project=project, name=name).first() or create_experiment(project, name)


def tracking_run(project, owner, name: str = "run", experiment_name: str = "exp", **fields):
    from apps.models.services import create_run

    return create_run(experiment(project, experiment_name), user=owner, run_name=name, **fields)


def registered_model(project, name: str = "model"):
    from apps.models.models import RegisteredModel
    from apps.models.registry import create_registered_model

    return RegisteredModel.objects.filter(project=project, name=name).first() or create_registered_model(project, name)


def model_version(project, owner, model_name: str = "model"):
    from apps.models.registry import create_model_version

    run = tracking_run(project, owner, name=f"for-{model_name}")
    return create_model_version(registered_model(project, model_name), source=f"runs:/{run.run_uuid}/model", run=run)


def model_alias(project, owner, alias: str = "production"):
    from apps.models.registry import set_alias

    version = model_version(project, owner)
    return set_alias(version.registered_model, alias, version.version)


def tracking_object_makers() -> dict:
    """model -> make(project, owner) for tests/access.py's route-walking permission tests."""
    from apps.models.models import Experiment, ModelAlias, ModelVersion, RegisteredModel, Run

    return {
        Experiment: lambda project, owner: experiment(project),
        Run: lambda project, owner: tracking_run(project, owner),
        RegisteredModel: lambda project, owner: registered_model(project),
        ModelVersion: model_version,
        ModelAlias: model_alias,
    }
