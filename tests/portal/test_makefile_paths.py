"""The Makefile puts the state it makes where settings read it: PORTAL_VAR_DIR and SECRET_KEY_FILE, as settings do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from django.conf import settings

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any of the variables under test (a developer's shell may set them)."""
    drop = {"PORTAL_VAR_DIR", "SECRET_KEY", "SECRET_KEY_FILE", "DATABASE_URL", "REDIS_URL", "MAKEFLAGS", "MAKELEVEL"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def make(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True
    )


def secret_key_seen_by_settings(env: dict[str, str]) -> str:
    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=settings.BASE_DIR,
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_the_secret_key_lands_in_portal_var_dir_and_settings_read_it(tmp_path):
    var = tmp_path / "elsewhere"
    env = clean_env(PORTAL_VAR_DIR=str(var))
    done = make("secret-key", env=env)
    assert done.returncode == 0, done.stderr
    key = (var / "secret_key").read_text().strip()
    assert len(key) >= 50
    assert (var / "secret_key").stat().st_mode & 0o077 == 0  # readable by its owner only
    assert secret_key_seen_by_settings(env) == key
    # made once: a second make keeps the key (sessions and encrypted fields depend on it)
    assert make("secret-key", env=env).returncode == 0
    assert (var / "secret_key").read_text().strip() == key


def test_secret_key_file_names_where_the_key_is_made(tmp_path):
    key_file = tmp_path / "keys" / "portal-key"
    env = clean_env(PORTAL_VAR_DIR=str(tmp_path / "var"), SECRET_KEY_FILE=str(key_file))
    assert make("secret-key", env=env).returncode == 0
    assert not (tmp_path / "var" / "secret_key").exists()
    assert secret_key_seen_by_settings(env) == key_file.read_text().strip()


def test_the_test_targets_read_the_key_the_makefile_made(tmp_path):
    """TEST_ENV hands the tests the same key file (CI's smoke pass sets PORTAL_VAR_DIR to a temporary folder)."""
    var = tmp_path / "smoke"
    done = make("-n", "test-smoke", env=clean_env(PORTAL_VAR_DIR=str(var)))
    assert done.returncode == 0, done.stderr
    pytest_line = next(line for line in done.stdout.splitlines() if "bin/pytest" in line)
    assert f"SECRET_KEY_FILE={var}/secret_key " in pytest_line
    assert f"PORTAL_VAR_DIR=${{PORTAL_VAR_DIR:-{settings.BASE_DIR}/var/test}}" in pytest_line
