from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.lib.env import envbool, envint, envlist, envprefixed, envsecret


def test_envbool_accepts_common_spellings_and_rejects_the_rest(monkeypatch):
    for raw, expected in [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False), ("", False)]:
        monkeypatch.setenv("FLAG", raw)
        assert envbool("FLAG") is expected
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="FLAG"):
        envbool("FLAG")
    monkeypatch.delenv("FLAG")
    assert envbool("FLAG", default=True) is True


def test_envint_names_the_variable_when_it_is_not_a_number(monkeypatch):
    monkeypatch.setenv("SIZE", "12")
    assert envint("SIZE", 1) == 12
    monkeypatch.setenv("SIZE", "twelve")
    with pytest.raises(ImproperlyConfigured, match="SIZE must be an integer"):
        envint("SIZE", 1)


def test_envlist_splits_and_trims(monkeypatch):
    monkeypatch.setenv("HOSTS", " a.example , b.example,, ")
    assert envlist("HOSTS") == ["a.example", "b.example"]


def test_envsecret_reads_the_file_form(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("TOKEN_FILE", str(secret))
    assert envsecret("TOKEN") == "from-a-file"
    monkeypatch.setenv("TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="TOKEN_FILE"):
        envsecret("TOKEN")


def test_settings_refuse_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    env["PORTAL_VAR_DIR"] = str(tmp_path)  # no generated key there either
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='portal.settings'; django.setup()",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off" in result.stderr


def test_envprefixed_collects_lowercased_names_and_rejects_empty_values(monkeypatch):
    monkeypatch.setenv("TASK_ENV_TRAIN", "/opt/train/bin/python")
    monkeypatch.setenv("TASK_ENV_LLM_FT", " /opt/llm/bin/python ")
    assert envprefixed("TASK_ENV_") == {"train": "/opt/train/bin/python", "llm_ft": "/opt/llm/bin/python"}
    monkeypatch.setenv("TASK_ENV_TRAIN", " ")
    with pytest.raises(ImproperlyConfigured, match="TASK_ENV_TRAIN is set but empty"):
        envprefixed("TASK_ENV_")
