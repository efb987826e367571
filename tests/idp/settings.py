"""A tiny OpenID Connect identity provider (django-oidc-provider) that the single sign-on tests run on loopback.

Its own SQLite file (IDP_DB), its own cookie names: two Django apps on 127.0.0.1 share cookies across ports, and
a shared `sessionid`/`csrftoken` would make the portal and the IdP overwrite each other's sessions.
"""

import os

SECRET_KEY = os.environ.get("IDP_SECRET_KEY", "idp-test-only-key")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.idp.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [os.path.join(os.path.dirname(__file__), "templates")],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("IDP_DB", "idp.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test users only: fast
USE_TZ = True
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
LOGIN_URL = "/login/"
SITE_URL = os.environ.get("IDP_URL", "")
OIDC_USERINFO = "tests.idp.directory.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.idp.directory.GroupsScopeClaims"
