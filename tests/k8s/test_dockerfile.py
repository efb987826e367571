"""The Dockerfile has the essentials (no Docker daemon or hadolint here, so it is read, not built): a pinned
python:3.11-slim base, requirements installed before the code, static files collected with a key that does
not outlive the build, VAR_DIR on a volume, a numeric non-root user that the manifests in k8s/ agree with, and
the web server as the default command. `.dockerignore` keeps what the image runs and drops the rest.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.k8s.render import REPO

pytestmark = pytest.mark.smoke


def instructions(path: Path = REPO / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        found.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def args_of(steps: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for w, rest in steps if w == word]


def index_of(steps: list[tuple[str, str]], word: str, needle: str) -> int:
    hits = [i for i, (w, rest) in enumerate(steps) if w == word and needle in rest]
    assert hits, f"no {word} containing {needle!r}"
    return hits[0]


def stages(steps: list[tuple[str, str]]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(base, name, instructions) per build stage, in order ("" for an unnamed stage)."""
    found: list[tuple[str, str, list[tuple[str, str]]]] = []
    for word, rest in steps:
        if word == "FROM":
            base, _, name = rest.partition(" AS ")
            found.append((base.strip(), name.strip(), []))
        elif found:
            found[-1][2].append((word, rest))
    return found


def test_base_image_is_python_311_slim_and_pinned():
    steps = instructions()
    base = stages(steps)[0][0]
    defaults = dict(re.fullmatch(r"(\w+)=(\S+)", rest).groups() for rest in args_of(steps, "ARG") if "=" in rest)
    image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], base)
    name, _, tag = image.partition(":")
    assert name == "python"
    assert tag.startswith("3.11-slim") or tag.startswith("3.11."), image
    assert tag
    assert "latest" not in tag


def test_the_train_target_adds_the_train_environment_and_java_and_a_plain_build_is_the_portal():
    """`docker build --target train`: the portal's image plus requirements-train.txt and a Java 17 runtime for Spark,
    back to the numeric user; the last stage (what a plain `docker build .` makes) is the portal's image itself."""
    found = stages(instructions())
    assert [(base, name) for base, name, _steps in found][1:] == [("portal", "train"), ("portal", "")]
    assert found[0][1] == "portal"
    _base, _name, train = found[1]
    runs = args_of(train, "RUN")
    assert any("openjdk-17-jre-headless" in rest and "--no-install-recommends" in rest for rest in runs)
    assert any("rm -rf /var/lib/apt/lists" in rest for rest in runs)
    copy = index_of(train, "COPY", "requirements-train.txt")
    install = index_of(train, "RUN", "-r requirements-train.txt")
    assert copy < install
    assert args_of(train, "USER")[0] == "root"
    assert args_of(train, "USER")[-1] == args_of(found[0][2], "USER")[-1]  # the portal's numeric user again
    assert found[2][2] == []  # the default target adds nothing
    assert (REPO / "requirements-train.txt").is_file()
    assert "pyspark==" in (REPO / "requirements-train.txt").read_text()


def test_requirements_are_installed_in_a_layer_before_the_code():
    steps = instructions()
    copy_requirements = index_of(steps, "COPY", "requirements.txt")
    install = index_of(steps, "RUN", "pip install")
    copy_code = index_of(steps, "COPY", ". .")
    assert copy_requirements < install < copy_code
    assert "-r requirements.txt" in steps[install][1]


def test_static_files_are_collected_with_a_build_only_key():
    steps = instructions()
    collect = index_of(steps, "RUN", "collectstatic")
    assert index_of(steps, "COPY", ". .") < collect
    assert "SECRET_KEY=" in steps[collect][1]  # set for that command only …
    assert not any("SECRET_KEY" in rest for rest in args_of(steps, "ENV") + args_of(steps, "ARG"))  # … not kept


def test_var_dir_is_a_volume_and_the_code_is_importable_from_anywhere():
    steps = instructions()
    env = " ".join(args_of(steps, "ENV"))
    var_dir = re.search(r"PORTAL_VAR_DIR=(\S+)", env).group(1)
    [volume] = args_of(steps, "VOLUME")
    assert json.loads(volume) == [var_dir]
    # The VOLUME comes after the build writes under it: Docker discards later changes to a volume path.
    assert index_of(steps, "RUN", "collectstatic") < index_of(steps, "VOLUME", var_dir)
    [workdir] = args_of(steps, "WORKDIR")
    # Task pods start in their output folder; `python -m apps.jobs.builtin_tasks.<name>` must still resolve.
    assert re.search(r"PYTHONPATH=(\S+)", env).group(1) == workdir
    assert (REPO / "apps" / "jobs" / "builtin_tasks" / "shell.py").is_file()


def test_it_runs_as_the_numeric_non_root_user_the_manifests_expect():
    steps = instructions()
    users = args_of(steps, "USER")
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), "runAsNonRoot can only verify a numeric USER"
    assert int(uid) > 0
    portal_pods = []
    for path in sorted((REPO / "k8s" / "base").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            tpl = (doc or {}).get("spec", {}).get("template", {})
            if tpl.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/name") == "mlops-portal":
                portal_pods.append((doc["metadata"]["name"], tpl["spec"]["securityContext"]))
    assert len(portal_pods) == 6  # web, worker, kube-worker, beat, controller, migrate
    for name, security in portal_pods:
        assert (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid or uid)), name


def test_default_command_is_the_asgi_web_server_in_exec_form():
    [cmd] = args_of(instructions(), "CMD")
    argv = json.loads(cmd)  # exec form: uvicorn is PID 1 and gets SIGTERM itself
    assert argv[:2] == ["uvicorn", "portal.asgi:application"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--port") + 1] == "8000"
    assert args_of(instructions(), "EXPOSE") == ["8000"]


# --- .dockerignore ---------------------------------------------------------------------------------------


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, for the patterns used here: the last matching pattern wins; a match on a parent folder
    excludes everything under it; `!` re-includes."""
    result = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(p, pattern[3:]) for p in parts)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) and p.count("/") == pattern.count("/") for p in prefixes)
        if hit:
            result = not negate
    return result


def test_dockerignore_keeps_what_the_image_runs_and_drops_the_rest():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    needed = [
        "manage.py",
        "requirements.txt",
        "requirements-train.txt",  # the train target installs it
        "portal/asgi.py",
        "apps/jobs/builtin_tasks/shell.py",
        "templates/base.html",
        "static/js/portal.js",
        "fixtures/job_templates.yaml",
        "k8s/crds/pytorchjob.json",  # the controller validates custom resources against these at run time
    ]
    for path in needed:
        assert not ignored(path, patterns), path
    for path in [
        ".git/HEAD",
        ".venv/bin/python",
        ".venv-train/bin/python",
        "var/portal.sqlite3",
        "tests/conftest.py",
        "apps/jobs/__pycache__/models.cpython-311.pyc",
        "k8s/overlays/prod/kustomization.yaml",
    ]:
        assert ignored(path, patterns), path
