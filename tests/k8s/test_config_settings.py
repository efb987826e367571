"""portal/settings.py accepts what the overlays' ConfigMap and Secret give it, and reads it as meant.

Starts Django in a subprocess with exactly that environment (PORTAL_VAR_DIR moved to a temporary folder, since
settings create it) and runs the system checks, so a value the strict env readers reject fails here, not in a pod.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from tests.k8s.render import OVERLAYS, REPO, config, generated, of_kind, render

PROBE = """
import json, django
django.setup()
from django.conf import settings as s
from django.core.management import call_command
call_command("check", fail_level="ERROR")
print(json.dumps({
    "DEBUG": s.DEBUG, "ALLOWED_HOSTS": s.ALLOWED_HOSTS, "CSRF_TRUSTED_ORIGINS": s.CSRF_TRUSTED_ORIGINS,
    "SESSION_COOKIE_SECURE": s.SESSION_COOKIE_SECURE, "PORTAL_RUNTIME": s.PORTAL_RUNTIME,
    "PORTAL_WORK_DIR": str(s.PORTAL_WORK_DIR), "MEDIA_ROOT": str(s.MEDIA_ROOT), "SITE_URL": s.SITE_URL,
    "ENGINE": s.DATABASES["default"]["ENGINE"], "HOST": s.DATABASES["default"]["HOST"],
    "BROKER": s.CELERY_BROKER_URL, "LAYER": s.CHANNEL_LAYERS["default"]["BACKEND"], "SECRET_KEY": s.SECRET_KEY,
}))
"""

# What prod's operator-created Secret holds (k8s/README.md); values made up for the test.
PROD_SECRET = {
    "SECRET_KEY": "test-only-key-for-the-settings-probe",
    "POSTGRES_PASSWORD": "pw",
    "DATABASE_URL": "postgres://portal:pw@portal-postgres:5432/portal",
}


def secret_env(overlay: str) -> dict[str, str]:
    if overlay == "prod":
        return PROD_SECRET
    secret = generated(render(overlay), "Secret", "portal-secrets")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_settings_start_with_the_overlays_environment(overlay, tmp_path):
    objs = render(overlay)
    env_config = config(objs)
    keep = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(env_config)
    env.update(secret_env(overlay))
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", PORTAL_VAR_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["SECRET_KEY"] == env["SECRET_KEY"]
    assert seen["DEBUG"] is (overlay == "dev")
    assert seen["ALLOWED_HOSTS"] == env_config["ALLOWED_HOSTS"].split(",")
    assert seen["PORTAL_RUNTIME"] == "kubernetes"
    assert seen["PORTAL_WORK_DIR"] == env_config["PORTAL_WORK_DIR"]
    assert seen["MEDIA_ROOT"] == env_config["MEDIA_ROOT"]
    assert seen["SITE_URL"] == env_config["SITE_URL"]
    assert (seen["ENGINE"], seen["HOST"]) == ("django.db.backends.postgresql", "portal-postgres")
    # Redis for both Celery and Channels: the embedded folder broker would not span pods.
    assert seen["BROKER"] == env_config["REDIS_URL"]
    assert seen["LAYER"] == "channels_redis.pubsub.RedisPubSubChannelLayer"
    if overlay == "prod":
        assert seen["SESSION_COOKIE_SECURE"] is True
        assert seen["CSRF_TRUSTED_ORIGINS"] == [env_config["CSRF_TRUSTED_ORIGINS"]]
        assert not of_kind(objs, "Secret")
