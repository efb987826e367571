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
