"""The notebook starter app: installed into a fresh project, its notebook starts for real (JupyterLab under the
local agent) with the starter notebook and its data in the installer's folder; uninstalling keeps the files."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from apps.appstore.services import add_version, install, uninstall
from apps.notebooks import services as notebooks
from apps.notebooks import workspace
from apps.notebooks.models import Notebook
from tests.appstore.factories import builtin_version, tiny_bundle
from tests.factories import ProjectFactory, UserFactory
from tests.notebooks.conftest import nb_agent, notebook_python, wait_running, work_dir  # noqa: F401 (fixtures)


@pytest.mark.django_db
def test_the_starter_notebook_is_a_valid_notebook_and_installs_with_its_data(world, settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    installation = install(builtin_version("notebook-starter"), world.project_a, world.alice, parameters={"cpu": 0.5})
    [notebook] = installation.objects_of("notebooks")
    assert (notebook.owner, notebook.name, float(notebook.cpu)) == (world.alice, "notebook-starter", 0.5)
    folder = workspace.home_dir(world.project_a, world.alice) / "notebook-starter"
    starter = json.loads((folder / "starter.ipynb").read_text())
    assert starter["nbformat"] == 4
    assert any("LogisticRegression" in "".join(cell["source"]) for cell in starter["cells"])
    assert (folder / "iris.csv").read_text().startswith("sepal_length,")

    assert uninstall(installation) == ["datasets:notebook-starter-iris"]
    assert not Notebook.objects.exists()
    assert (folder / "starter.ipynb").is_file()  # the user's files stay


@pytest.mark.django_db
def test_a_failed_install_removes_the_files_it_wrote(world, settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    # The first notebook writes its files; the second is refused: nothing of either stays.
    notebooks_ = [{"name": "{{ install }}", "files": ["data/rows.csv"]}, {"name": "{{ install }}-2", "cpu": 10_000}]
    version = add_version(tiny_bundle(notebooks=notebooks_))
    with pytest.raises(ValidationError) as caught:
        install(version, world.project_a, world.alice, name="tiny")
    assert list(caught.value.message_dict) == ["spec.notebooks[1].cpu"]
    assert not (workspace.home_dir(world.project_a, world.alice) / "tiny").exists()
    assert not Notebook.objects.exists()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("work_dir", "nb_agent")
def test_the_starter_notebook_runs():
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="fresh")
    installation = install(builtin_version("notebook-starter"), project, owner)
    [notebook] = installation.objects_of("notebooks")

    notebook = wait_running(notebooks.start_notebook(notebook))

    assert notebook.status == Notebook.Status.RUNNING
    assert (workspace.home_dir(project, owner) / "notebook-starter" / "starter.ipynb").is_file()
    notebooks.stop_notebook(notebook)
