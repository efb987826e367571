"""Settings of the portal: one file, driven by environment variables (see README, "Configuration").

Without any variable set the portal runs embedded: SQLite in `var/`, a Celery broker on the
filesystem and a SQLite-backed channel layer, so the whole product works on one machine with
no server to install. `DATABASE_URL` and `REDIS_URL` switch to PostgreSQL and Redis.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from csp.constants import NONCE, NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from portal.lib.clientaddr import parse_networks
from portal.lib.env import envbool, envint, envlist, envprefixed, envsecret, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("PORTAL_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", False)
SECRET_KEY = envsecret("SECRET_KEY")
if not SECRET_KEY and (VAR_DIR / "secret_key").is_file():
    SECRET_KEY = (VAR_DIR / "secret_key").read_text().strip()  # generated once by `make run`
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off; `make run` generates one in var/."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG"
SECRET_KEY_FALLBACKS = envlist("SECRET_KEY_FALLBACKS")  # old keys still decrypt (rotation), new writes use SECRET_KEY
# Encrypted fields (kubeconfigs, registry passwords) derive their Fernet keys from SECRET_KEY and this salt.
SALT_KEY = envlist("PORTAL_ENCRYPTION_SALT", "mlops-portal-fields")

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")
# Where tasks reach the API (and tracking API); `make run PORT=…` starts every process with PORTAL_PORT.
SITE_URL = envstr("SITE_URL", f"http://127.0.0.1:{envint('PORTAL_PORT', 8000)}")
# Where pods on a Kubernetes cluster reach the same APIs (e.g. http://portal.mlops.svc:8000): SITE_URL is how this
# host's processes reach the portal, a loopback address by default that no pod can use. Unset, SITE_URL stands in
# when it is not a loopback address; otherwise pods get no API URL and dry runs warn (apps/runtime/base.py).
PORTAL_CLUSTER_URL = envstr("PORTAL_CLUSTER_URL", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_prometheus",
    "django_htmx",
    "channels",
    "guardian",
    "csp",
    "axes",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.outbox",
    "apps.accounts",
    "apps.projects",
    "apps.runtime",
    "apps.jobs",
    "apps.datasets",
    "apps.models",
    "apps.audit",
    "apps.notebooks",
    "apps.knowledge",
    "apps.serving",
    "apps.appstore",
    "apps.labeling",
    "apps.hpo",
    "apps.retraining",
    "apps.alerts",
    "apps.monitoring",
    "apps.console",
]

MIDDLEWARE = [
    "portal.lib.streaming.StreamingUnderASGIMiddleware",  # outermost: sees every streamed response
    "portal.lib.clientaddr.ClientAddressMiddleware",  # before anything counts by the client's address
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.lib.untrusted.RequestLineMiddleware",  # a NUL in the path or query string is a 400, before any view
    "portal.lib.dbtimeout.StatementTimeoutMiddleware",  # a time limit on each SQL statement of a request
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.middleware.UserLanguageMiddleware",  # after auth: a signed-in user's saved language wins
    "apps.audit.middleware.AuditMiddleware",  # after auth: one audit entry per successful mutating request
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: turns a flagged login into its lockout page
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
                "apps.accounts.context_processors.notifications",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")
# Long-running processes (worker, agent) set DB_CONN_MAX_AGE to keep their connections (see Procfile).
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 0), conn_health_checks=True)
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web, worker and agent processes read while one of them writes.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # A file, not memory, so that live-server tests in other threads see the same data.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-portal.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Seconds each SQL statement of a request may take (portal/lib/dbtimeout.py); 0: no limit. Workers, the agent
# and migrations are not limited.
PORTAL_REQUEST_STATEMENT_TIMEOUT = envint("PORTAL_REQUEST_STATEMENT_TIMEOUT", 30)

# --- Redis, Celery, Channels ---------------------------------------------------------------------
REDIS_URL = envstr("REDIS_URL")
REDIS_PREFIX = envstr("REDIS_PREFIX", "portal")

# Set by `make run`'s supervisor (portal/supervise.py) for the processes it starts: /readyz reports theirs.
PORTAL_SUPERVISOR_STATE = envstr("PORTAL_SUPERVISOR_STATE")

CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Celery's Django fix-up closes the database connection before and after every task unless this is set;
# portal/celery.py applies Django's CONN_MAX_AGE rule instead (the fix-up still recycles every 2×this tasks).
CELERY_DB_REUSE_MAX = 1000
# Cluster work (apply, delete, inventory, repair: apps/runtime/tasks.py) has a queue of its own, so that the workers
# that talk to clusters scale, and hold the cluster credentials, apart from the others (docs/kubernetes.md).
CELERY_TASK_ROUTES = {"apps.runtime.tasks.kube_*": {"queue": "kubernetes"}}
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": f"{REDIS_PREFIX}:celery:"}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # redis-py 8 defaults socket_timeout to 5 s, which closes idle websockets
            # (channels_redis#422): never time out a blocking read of the layer.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}], "prefix": f"{REDIS_PREFIX}:ws"},
        }
    }
else:
    CELERY_BROKER_DIR = VAR_DIR / "celery"
    CELERY_BROKER_URL = "filesystem://"
    # kombu's folder transport with whole writes and a consumer that survives an unreadable file (kombu#1551).
    CELERY_BROKER_TRANSPORT = "portal.lib.folderbroker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
        # The folder is polled: at the default 1 s a worker takes ~1 message per second per process.
        "polling_interval": 0.05,
    }
    CELERY_RESULT_BACKEND = None
    for _folder in ("queue", "control"):
        (CELERY_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    DATABASES["channels"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(VAR_DIR / "channels.sqlite3"),
        # IMMEDIATE, as for the default database: a deferred transaction that reads, then writes (the layer's
        # group_add is a get_or_create) fails at once with "database is locked" when another process wrote
        # meanwhile (WAL's stale snapshot is not waited for); a websocket's handshake then answered 500 under load.
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
        "TEST": {"NAME": str(VAR_DIR / "test-channels.sqlite3")},
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_lite.layers.core.SQLiteChannelLayer",
            "CONFIG": {"database": "channels", "capacity": 1000},
        }
    }
    INSTALLED_APPS.append("channels_lite")
    DATABASE_ROUTERS = ["channels_lite.router.ChannelsRouter"]

# --- Auth -------------------------------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row; anonymous visitors see nothing.
GUARDIAN_RAISE_403 = False
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "projects:dashboard"
LOGOUT_REDIRECT_URL = "accounts:login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# --- Single sign-on (OIDC, mozilla-django-oidc; see docs/sso.md) ---------------------------------------
# Off unless a client id is set. Endpoints come from OIDC_OP_DISCOVERY_URL (fetched at first use, cached)
# unless given one by one; apps/accounts/oidc.py reads them and the check portal.E020–E023 catches gaps.
OIDC_RP_CLIENT_ID = envstr("OIDC_RP_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = envsecret("OIDC_RP_CLIENT_SECRET")
OIDC_OP_DISCOVERY_URL = envstr("OIDC_OP_DISCOVERY_URL")
for _name in ("AUTHORIZATION", "TOKEN", "USER", "JWKS", "LOGOUT"):
    if envstr(f"OIDC_OP_{_name}_ENDPOINT"):  # unset ones stay unset: discovery fills them in
        globals()[f"OIDC_OP_{_name}_ENDPOINT"] = envstr(f"OIDC_OP_{_name}_ENDPOINT")
OIDC_RP_SIGN_ALGO = envstr("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = envstr("OIDC_RP_SCOPES", "openid email profile groups")
OIDC_PROVIDER_NAME = envstr("OIDC_PROVIDER_NAME", "SSO")  # the login button: "Sign in with <name>"
OIDC_USERNAME_CLAIM = envstr("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_GROUPS_CLAIM = envstr("OIDC_GROUPS_CLAIM", "groups")
OIDC_GROUP_ROLES = envstr("OIDC_GROUP_ROLES")  # "idp-group=project-slug:role,…"
OIDC_CREATE_USER = envbool("OIDC_CREATE_USER", True)
OIDC_USE_PKCE = envbool("OIDC_USE_PKCE", True)
OIDC_TIMEOUT = envint("OIDC_TIMEOUT", 10)
OIDC_VERIFY_SSL = envbool("OIDC_VERIFY_SSL", True)
OIDC_STORE_ID_TOKEN = True  # the id_token_hint of the IdP logout
OIDC_AUTHENTICATION_CALLBACK_URL = "accounts:oidc-callback"
OIDC_OP_LOGOUT_URL_METHOD = "apps.accounts.oidc.provider_logout_url"
# PORTAL_PASSWORD_LOGIN=false: no password form, and no backend that accepts a password (admin login included).
PORTAL_PASSWORD_LOGIN = envbool("PORTAL_PASSWORD_LOGIN", True)
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if PORTAL_PASSWORD_LOGIN else []),
    *(["apps.accounts.oidc.PortalOIDCBackend"] if OIDC_RP_CLIENT_ID else []),
    "guardian.backends.ObjectPermissionBackend",
]

PORTAL_TOKEN_MAX_DAYS = envint("PORTAL_TOKEN_MAX_DAYS", 365)
PORTAL_ALLOW_PROJECT_CREATION = envbool("PORTAL_ALLOW_PROJECT_CREATION", True)

# --- Runtime --------------------------------------------------------------------------------------
PORTAL_RUNTIME = envstr("PORTAL_RUNTIME", "local")
# The queue's policy (apps/jobs/queue_policy.py, docs/scheduling.md): "greedy" (start whatever fits, in priority order:
# the default, as before issue #31) or "backfill" (a reservation for the head task, aging, fair share among projects,
# gang admission on nodes; not the default: bench/scheduling.py does not show it at least as good yet).
PORTAL_QUEUE_POLICY = envstr("PORTAL_QUEUE_POLICY", "greedy")
# Aging: a waiting task's priority rises one level per this many seconds waited (0: never), by at most _MAX levels.
PORTAL_QUEUE_AGING_SECONDS = envint("PORTAL_QUEUE_AGING_SECONDS", 3600)
PORTAL_QUEUE_AGING_MAX = envint("PORTAL_QUEUE_AGING_MAX", 3)
# Fair share under "backfill": among equal (aged) priorities, the project holding the least of its quota goes first;
# False: the oldest task goes first (a steadier head of the queue: docs/scheduling.md, "Node-level reservations").
PORTAL_QUEUE_FAIR_SHARE = envbool("PORTAL_QUEUE_FAIR_SHARE", True)
# How long a task without a timeout is expected to run, for reservations (seconds).
PORTAL_QUEUE_DEFAULT_ESTIMATE = envint("PORTAL_QUEUE_DEFAULT_ESTIMATE", 24 * 3600)
# Borrowing (apps/jobs/borrowing.py): tasks of preemptible templates may run above their project's quota on room no
# task within its quota waits for, and are preempted (requeued) when a project under its quota needs the room. Only
# on runtimes that can preempt (Runtime.can_preempt: the simulated one; not local or Kubernetes yet).
PORTAL_QUEUE_BORROWING = envbool("PORTAL_QUEUE_BORROWING", False)
# The portal's own image: what "{portal}" in a template's image means (the built-in tasks need the portal's code).
PORTAL_IMAGE = envstr("PORTAL_IMAGE", "mlops-portal:dev")


def _train_image(image: str) -> str:
    """The training image beside `image` (the Dockerfile's `train` target): its tag with "-train" ("name:1.2" ->
    "name:1.2-train", no tag -> "name:train"). An image named by digest has no neighbour: set PORTAL_TRAIN_IMAGE."""
    if "@" in image:
        return image
    name, colon, tag = image.rpartition(":")
    return f"{name}:{tag}-train" if colon and "/" not in tag else f"{image}:train"


# What "{portal}" means for templates whose command runs the "train" task environment ("{python:train}": torch, ONNX,
# SHAP, FLAML, PySpark and Java); docs/kubernetes.md "Task images".
PORTAL_TRAIN_IMAGE = envstr("PORTAL_TRAIN_IMAGE", "") or _train_image(PORTAL_IMAGE)
# The Kubernetes runtime, in seconds: the controller's (`manage.py runkube`) pass, heartbeat, full resync of watched
# objects, how long an image may fail to pull before the task fails, how long logs drain after a workload ends, a
# silent log stream's reconnect, Events lookups; beat's inventory refresh; the API retry policy; the first retry of a
# task whose cluster cannot be reached, and how long a row may stay unapplied before the repair sweep queues it again.
for _name, _default in {
    "TICK": "1", "HEARTBEAT": "2", "RESYNC": "60", "INVENTORY": "30", "PULL_GRACE": "120", "LOG_DRAIN": "30",
    "LOG_IDLE": "300", "EVENTS": "10", "RETRY_ATTEMPTS": "5", "RETRY_BASE": "0.2", "REQUEST_TIMEOUT": "30",
    "TASK_RETRY_BASE": "2", "REPAIR_AFTER": "300",
}.items():  # fmt: skip
    globals()[f"PORTAL_KUBE_{_name}"] = float(envstr(f"PORTAL_KUBE_{_name}", _default))
# Where task attempts write their outputs (PORTAL_OUTPUT_DIR) and read their inputs.
PORTAL_WORK_DIR = Path(envstr("PORTAL_WORK_DIR", str(VAR_DIR / "work")))
# The sandbox of local workloads (apps/runtime/local/sandbox.py, docs/security.md "Local runtime sandbox"):
# "auto" (default) runs every task, notebook and model server in its own namespaces (bubblewrap + pasta) when this
# host has them, and otherwise warns and runs the workloads of ONE project only; "required" refuses every workload
# when the sandbox is missing; "off" is the single trusted team mode (no sandbox, no refusal: every workload can
# read what the portal's user can).
PORTAL_LOCAL_SANDBOX = envstr("PORTAL_LOCAL_SANDBOX", "auto").strip().lower()
if PORTAL_LOCAL_SANDBOX not in {"auto", "required", "off"}:
    raise ImproperlyConfigured(f"PORTAL_LOCAL_SANDBOX must be auto, required or off; got {PORTAL_LOCAL_SANDBOX!r}")
# Open files a sandboxed workload may hold (RLIMIT_NOFILE); core dumps are always off.
PORTAL_LOCAL_SANDBOX_NOFILE = envint("PORTAL_LOCAL_SANDBOX_NOFILE", 65536)
# An agent whose heartbeat is older than this is dead: its running workloads are lost.
PORTAL_AGENT_TIMEOUT = envint("PORTAL_AGENT_TIMEOUT", 15)
# Reserve this share of the machine for the portal itself (cores) when offering capacity.
PORTAL_AGENT_RESERVED_CPU = float(envstr("PORTAL_AGENT_RESERVED_CPU", "0"))
# Task environments: the interpreter a command's "{python}" (default) or "{python:<name>}" runs. torch lives in
# "train" (`make train-env`) and "llm" (`make llm-env`) only, never in the portal's venv.
# PORTAL_TASK_ENV_<NAME>=/path/to/python sets one, or adds a new name.
PORTAL_TASK_ENVS = {
    "default": sys.executable,
    "train": str(BASE_DIR / ".venv-train" / "bin" / "python"),
    "notebook": str(BASE_DIR / ".venv-notebook" / "bin" / "python"),
    "llm": str(BASE_DIR / ".venv-llm" / "bin" / "python"),  # the `llm` serving runtime (`make llm-env`)
    **envprefixed("PORTAL_TASK_ENV_"),
}
for _name, _python in PORTAL_TASK_ENVS.items():
    if not Path(_python).is_absolute():
        raise ImproperlyConfigured(
            f"PORTAL_TASK_ENV_{_name.upper()} must be the absolute path of a Python; got {_python!r}"
        )

# --- Notebooks (apps/notebooks; docs/notebooks.md) ----------------------------------------------------------
# The image of a notebook on a cluster (it must have JupyterLab); locally the "notebook" task environment runs it.
PORTAL_NOTEBOOK_IMAGE = envstr("PORTAL_NOTEBOOK_IMAGE", "quay.io/jupyter/base-notebook:latest")
# Minutes without kernel or terminal activity before a notebook is stopped (a notebook's own setting, then its
# project's, then these; GPU notebooks hold scarcer hardware and default shorter), and the warning ahead of it.
PORTAL_NOTEBOOK_IDLE_TIMEOUT = envint("PORTAL_NOTEBOOK_IDLE_TIMEOUT", 60)
PORTAL_NOTEBOOK_GPU_IDLE_TIMEOUT = envint("PORTAL_NOTEBOOK_GPU_IDLE_TIMEOUT", 30)
PORTAL_NOTEBOOK_IDLE_WARNING = envint("PORTAL_NOTEBOOK_IDLE_WARNING", 10)
PORTAL_NOTEBOOK_CULL_INTERVAL = envint("PORTAL_NOTEBOOK_CULL_INTERVAL", 60)  # seconds between culler passes
PORTAL_NOTEBOOK_START_TIMEOUT = envint("PORTAL_NOTEBOOK_START_TIMEOUT", 300)  # seconds to answer before it fails
PORTAL_NOTEBOOK_TOKEN_DAYS = envint("PORTAL_NOTEBOOK_TOKEN_DAYS", 7)  # the injected API token's life (revoked at stop)
# The code-server binary that VS Code notebooks run; empty: VS Code is refused (it is not installed here).
PORTAL_CODE_SERVER = envstr("PORTAL_CODE_SERVER")

# --- Labeling (apps/labeling; docs/labeling.md) ---------------------------------------------------------------
# "off" leaves Label Studio out: `make run` does not start it and the labeling pages say labeling is off.
LABELING = envstr("LABELING", "on").strip().lower()
if LABELING not in {"on", "off"}:
    raise ImproperlyConfigured(f"LABELING must be 'on' or 'off'; got {LABELING!r}")
# An existing Label Studio server (and its access token, or the file holding it); empty: the one `make run` starts
# on 127.0.0.1:LABEL_STUDIO_PORT, provisioned by `manage.py runlabelstudio` (its token stored encrypted).
LABEL_STUDIO_URL = envstr("LABEL_STUDIO_URL").rstrip("/")
LABEL_STUDIO_TOKEN = envsecret("LABEL_STUDIO_TOKEN")
LABEL_STUDIO_PORT = envint("LABEL_STUDIO_PORT", 8090)
# The venv Label Studio runs from (`make labelstudio-env`) and its data folder (SQLite database, uploads).
LABEL_STUDIO_VENV = Path(envstr("LABEL_STUDIO_VENV", str(BASE_DIR / ".venv-labelstudio")))
LABEL_STUDIO_DATA_DIR = Path(envstr("LABEL_STUDIO_DATA_DIR", str(VAR_DIR / "labelstudio")))
LABEL_STUDIO_TIMEOUT = envint("LABEL_STUDIO_TIMEOUT", 30)  # seconds for one call to Label Studio
# The address Label Studio reaches the portal at (signed media URLs, webhooks); default: the local web process.
LABELING_PORTAL_URL = envstr("LABELING_PORTAL_URL", f"http://127.0.0.1:{envint('PORTAL_PORT', 8000)}").rstrip("/")
LABELING_MEDIA_URL_TTL = envint("LABELING_MEDIA_URL_TTL", 7 * 24 * 3600)  # seconds a signed media URL is valid
LABELING_IMPORT_BATCH = envint("LABELING_IMPORT_BATCH", 10_000)  # tasks per import request (bench/labeling.py)
LABELING_IMPORT_BYTES = envint("LABELING_IMPORT_BYTES", 32 * 2**20)  # about this much text per import request

# --- Knowledge bases (apps/knowledge; docs/knowledge.md) ---------------------------------------------------
PORTAL_KNOWLEDGE_MAX_BYTES = envint("PORTAL_KNOWLEDGE_MAX_BYTES", 20 * 1024 * 1024)  # largest document accepted
PORTAL_KNOWLEDGE_MAX_TOKENS = envint("PORTAL_KNOWLEDGE_MAX_TOKENS", 256)  # longest answer asked of the LLM

# --- Tracking API (MLflow REST API; apps/models/mlflow_api, docs/tracking.md) -------------------------------
# Threads per web process serving it, each keeping its database connection between requests (asgi.py there).
PORTAL_MLFLOW_API_THREADS = envint("PORTAL_MLFLOW_API_THREADS", 8)
# Seconds a token's user, scope and project grants are cached per process: a revoked token, a removed member or a
# changed role takes effect on the tracking API within that.
PORTAL_MLFLOW_AUTH_TTL = envint("PORTAL_MLFLOW_AUTH_TTL", 5)

# --- Serving router (/serving/<project>/<service>/…; apps/serving/router, docs/serving-router.md) -----------
# Seconds a service's routing table (ready replicas, canary/shadow weights) and an auth decision are cached per
# process: a change, a revoked token or a removed member takes effect within that.
PORTAL_SERVING_ROUTER_TABLE_TTL = envint("PORTAL_SERVING_ROUTER_TABLE_TTL", 2)
PORTAL_SERVING_ROUTER_AUTH_TTL = envint("PORTAL_SERVING_ROUTER_AUTH_TTL", 5)
PORTAL_SERVING_ROUTER_TIMEOUT = envint("PORTAL_SERVING_ROUTER_TIMEOUT", 60)  # seconds for a replica to answer
PORTAL_SERVING_ROUTER_CONNECT_TIMEOUT = envint("PORTAL_SERVING_ROUTER_CONNECT_TIMEOUT", 2)
PORTAL_SERVING_ROUTER_RETRY_AFTER = envint("PORTAL_SERVING_ROUTER_RETRY_AFTER", 5)  # avoid a refusing replica
PORTAL_SERVING_ROUTER_KEEPALIVE_S = envint("PORTAL_SERVING_ROUTER_KEEPALIVE_S", 4)  # < the replica's 5 s
PORTAL_SERVING_ROUTER_MAX_BODY_MB = envint("PORTAL_SERVING_ROUTER_MAX_BODY_MB", 64)
PORTAL_SERVING_ROUTER_SHADOW_MAX_INFLIGHT = envint("PORTAL_SERVING_ROUTER_SHADOW_MAX_INFLIGHT", 64)
PORTAL_SERVING_ROUTER_FLUSH_S = envint("PORTAL_SERVING_ROUTER_FLUSH_S", 5)  # stats written this often
PORTAL_SERVING_ROUTER_STATS_DAYS = envint("PORTAL_SERVING_ROUTER_STATS_DAYS", 14)  # per-minute traffic rows kept
# uvicorn's access-log line for inference answered below 400 (every other request keeps its line): off by default,
# the router counts them (Prometheus, per-minute rows) and the line cost ~¼ of the router's CPU per request.
PORTAL_SERVING_ROUTER_ACCESS_LOG = envbool("PORTAL_SERVING_ROUTER_ACCESS_LOG", False)

# --- Serving control plane (deploy, roll out, roll back, autoscale; apps/serving, docs/serving.md) ----------
# Seconds a new revision's replicas have to answer /v2/health/ready before the rollout is rolled back.
PORTAL_SERVING_READY_TIMEOUT = envint("PORTAL_SERVING_READY_TIMEOUT", 180)
# Seconds between autoscaler passes, and how long measured load must want fewer replicas before they stop.
PORTAL_SERVING_AUTOSCALE_INTERVAL = envint("PORTAL_SERVING_AUTOSCALE_INTERVAL", 5)
PORTAL_SERVING_SCALE_DOWN_DELAY = envint("PORTAL_SERVING_SCALE_DOWN_DELAY", 60)
PORTAL_SERVING_SCALE_WINDOW = envint("PORTAL_SERVING_SCALE_WINDOW", 30)  # seconds of concurrency averaged
# Seconds a replica leaving the routing table keeps serving before it is stopped (> the router's table TTL).
PORTAL_SERVING_DRAIN_SECONDS = envint("PORTAL_SERVING_DRAIN_SECONDS", PORTAL_SERVING_ROUTER_TABLE_TTL + 1)
PORTAL_SERVING_RECONCILE_INTERVAL = envint("PORTAL_SERVING_RECONCILE_INTERVAL", 10)
# Replicas of a serving revision that may die within 10 minutes before it stops replacing them (a crash loop).
PORTAL_SERVING_MAX_RESTARTS = envint("PORTAL_SERVING_MAX_RESTARTS", 5)
# A rollout whose replicas are lost with their agent (killed, shut down) is retried this many times, the n-th
# retry PORTAL_SERVING_LOST_BACKOFF × 2^(n-1) seconds (at most 5 minutes) after the loss; then it fails.
PORTAL_SERVING_LOST_RETRIES = envint("PORTAL_SERVING_LOST_RETRIES", 5)
PORTAL_SERVING_LOST_BACKOFF = envint("PORTAL_SERVING_LOST_BACKOFF", 5)
# On Kubernetes with KServe installed: "RawDeployment" (Deployment + HPA, no Knative) or "Serverless" (Knative).
PORTAL_SERVING_KSERVE_MODE = envstr("PORTAL_SERVING_KSERVE_MODE", "RawDeployment")

# --- Security: cookies, HSTS, request sizes, Content-Security-Policy, login lockout, rate limits ------------
SESSION_COOKIE_NAME = envstr("SESSION_COOKIE_NAME", "portal_sessionid")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# The upload page's script reads the CSRF cookie; Django's docs: HttpOnly on it protects nothing.
CSRF_COOKIE_HTTPONLY = False
# Secure cookies whenever DEBUG is off and the portal is served over HTTPS (SITE_URL): a browser drops a Secure
# cookie that arrives over plain HTTP, so `make run` on http://127.0.0.1 keeps working.
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG and SITE_URL.startswith("https://"))
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_HSTS_SECONDS = envint("PORTAL_HSTS_SECONDS", 0)  # 0: no Strict-Transport-Security header
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("PORTAL_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("PORTAL_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = envbool("PORTAL_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # probes speak plain HTTP to the pod
# Behind a TLS-terminating proxy: PORTAL_PROXY_SSL_HEADER=X-Forwarded-Proto makes "https" there mean a secure
# request. Only set it when the proxy always overwrites that header, or clients could claim HTTPS themselves.
if envstr("PORTAL_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + envstr("PORTAL_PROXY_SSL_HEADER").upper().replace("-", "_"), "https")
# Proxies whose X-Forwarded-For names the client (addresses or CIDRs, e.g. the ingress controller's pods); none by
# default: the TCP peer is the client. Login lockouts and rate limits count by it (portal/lib/clientaddr.py).
try:
    PORTAL_TRUSTED_PROXIES = parse_networks(envlist("PORTAL_TRUSTED_PROXIES"))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# The bearer token Prometheus scrapes /metrics with (or PORTAL_METRICS_TOKEN_FILE); empty: only platform admins'
# sessions read it. A guessable one would expose project and service names: at least 32 characters.
PORTAL_METRICS_TOKEN = envsecret("PORTAL_METRICS_TOKEN")
if PORTAL_METRICS_TOKEN and len(PORTAL_METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("PORTAL_METRICS_TOKEN must be at least 32 characters (e.g. `openssl rand -hex 32`)")
# Request size limits (Django's defaults, made explicit and tunable). Dataset upload chunks and MLflow artifacts
# stream through request.read(), which these do not cap: they have their own limits in their apps.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("PORTAL_MAX_REQUEST_BODY", 2_621_440)
FILE_UPLOAD_MAX_MEMORY_SIZE = envint("PORTAL_MAX_UPLOAD_IN_MEMORY", 2_621_440)
DATA_UPLOAD_MAX_NUMBER_FIELDS = envint("PORTAL_MAX_FORM_FIELDS", 1000)
DATA_UPLOAD_MAX_NUMBER_FILES = envint("PORTAL_MAX_FORM_FILES", 100)
# Content-Security-Policy (django-csp): scripts only from our origin or carrying the request's nonce; no inline
# event handlers (static/js/portal.js wires data-confirm/data-autosubmit instead). Styles allow 'unsafe-inline'
# for the style="" attributes of server-computed widths and Swagger UI's <style>: styles cannot run code.
_csp_forms = [SELF]
for _url in (OIDC_OP_DISCOVERY_URL, envstr("OIDC_OP_AUTHORIZATION_ENDPOINT"), envstr("OIDC_OP_LOGOUT_ENDPOINT")):
    if _url:  # a login or logout form may redirect to the IdP, and Chrome applies form-action to redirects
        _csp_forms.append("{0.scheme}://{0.netloc}".format(urlsplit(_url)))
_csp = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:", "blob:"],
        "font-src": [SELF],
        "connect-src": [SELF],  # CSP3 'self' covers ws(s):// to the same host (log and notification sockets)
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": list(dict.fromkeys(_csp_forms)),
    }
}
# PORTAL_CSP_REPORT_ONLY=true: browsers report violations to their console and enforce nothing (trying a policy).
if envbool("PORTAL_CSP_REPORT_ONLY", False):
    CONTENT_SECURITY_POLICY_REPORT_ONLY = _csp
else:
    CONTENT_SECURITY_POLICY = _csp
# Brute-force protection (django-axes): after PORTAL_LOGIN_FAILURE_LIMIT failed logins from one IP for one
# username, that pair is refused for PORTAL_LOGIN_COOLOFF_MINUTES (the admin's login included).
AUTHENTICATION_BACKENDS.insert(0, "axes.backends.AxesStandaloneBackend")  # first: it vetoes before the others run
AXES_FAILURE_LIMIT = envint("PORTAL_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=envint("PORTAL_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "apps.accounts.views.locked_out"
# Rate limits (DRF throttle syntax "N/second|minute|hour|day"): password logins per client IP, token creations
# per user. Counted in the cache: Redis when REDIS_URL is set (shared by all web processes), else per process.
PORTAL_LOGIN_RATE = envstr("PORTAL_LOGIN_RATE", "20/minute")
PORTAL_TOKEN_CREATE_RATE = envstr("PORTAL_TOKEN_CREATE_RATE", "60/hour")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": f"{REDIS_PREFIX}:cache",
        }
    }

# --- REST API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header turns "not logged in" into 401, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "portal.lib.jsonsafe.JSONRenderer",  # NaN/±Infinity (metric values) as strings, not a 500
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "EXCEPTION_HANDLER": "apps.projects.api.errors.exception_handler",
    # DRF's own parsers ignore DATA_UPLOAD_MAX_MEMORY_SIZE: these hold every body to it (413). JSON bodies also
    # refuse NUL, lone surrogates and nesting past portal.lib.untrusted.MAX_DEPTH (a 400, not a 500).
    "DEFAULT_PARSER_CLASSES": [
        "portal.lib.untrusted.JSONParser",
        "portal.lib.bodylimit.FormParser",
        "portal.lib.bodylimit.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MLOps portal API",
    "DESCRIPTION": "Projects, members, tokens and everything that lives in a project.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.projects.api.schema.forbid_unknown_fields",  # bodies refuse unknown keys (StrictFieldsMixin)
    ],
    # Choice sets that share a field name with another app's ("role" is also a member's role).
    "ENUM_NAME_OVERRIDES": {
        "MemberRoleEnum": ["viewer", "editor", "admin", "owner"],
        "RevisionRoleEnum": "apps.serving.models.Role.choices",
        "TrafficRoleEnum": "apps.serving.api.serializers.TRAFFIC_ROLES",
        "AppVisibilityEnum": "apps.appstore.models.App.Visibility",  # an app's, and a publish request's audience
        "UploadVisibilityEnum": ["project", "public"],  # an uploaded bundle's
        "TokenKindEnum": "apps.accounts.models.ApiToken.Kind",  # personal, or minted for a task or notebook
    },
}

# --- I18N / static ------------------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("zh-hans", _("Simplified Chinese"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
# The image collects into its own folder (PORTAL_STATIC_ROOT): under PORTAL_VAR_DIR a mounted volume would hide it.
STATIC_ROOT = Path(envstr("PORTAL_STATIC_ROOT", str(VAR_DIR / "staticfiles")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing root before the first collectstatic
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = Path(envstr("MEDIA_ROOT", str(VAR_DIR / "media")))
MEDIA_URL = "/media/"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Dataset blobs (content-addressed) and tracking artifacts; see "Storage" in the README.
    "datasets": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT / "datasets"},
    },
    "artifacts": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT / "artifacts"},
    },
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Dataset blobs on S3-compatible storage (django-storages): PORTAL_STORAGE=s3 with AWS_STORAGE_BUCKET_NAME and
# credentials; AWS_S3_ENDPOINT_URL for MinIO/Ceph/moto. The filesystem under MEDIA_ROOT stays the default.
if envstr("PORTAL_STORAGE", "filesystem") == "s3":
    if not envstr("AWS_STORAGE_BUCKET_NAME"):
        raise ImproperlyConfigured("PORTAL_STORAGE=s3 needs AWS_STORAGE_BUCKET_NAME.")
    STORAGES["datasets"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": envstr("AWS_STORAGE_BUCKET_NAME"),
            "endpoint_url": envstr("AWS_S3_ENDPOINT_URL") or None,
            "region_name": envstr("AWS_S3_REGION_NAME") or None,
            "access_key": envsecret("AWS_ACCESS_KEY_ID") or None,
            "secret_key": envsecret("AWS_SECRET_ACCESS_KEY") or None,
            "location": envstr("AWS_LOCATION", "datasets"),
            "max_memory_size": 8 * 2**20,  # S3File spools to disk past this, never holds a blob in memory
        },
    }
# Serve straight from static/ too, so a forgotten collectstatic never breaks a page; off in an image (which
# collected at build time), where the finders' entries would replace the collected, compressed files.
WHITENOISE_USE_FINDERS = envbool("PORTAL_STATIC_FINDERS", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "axes": {"level": "WARNING"},  # axes: a line per start
        "httpx": {"level": "WARNING"},  # the notebook proxy's client: a line per proxied request otherwise
    },
}

# Seconds between two passes of the study driver over every running study (apps/hpo/driver.py).
PORTAL_HPO_INTERVAL = envint("PORTAL_HPO_INTERVAL", 5)
# Seconds between two compactions of the overview's roll-ups (apps/jobs/rollups.py): the deltas the overview sums on
# top of the summaries are at most this many seconds of runs' and tasks' changes.
PORTAL_ROLLUP_COMPACT_INTERVAL = envint("PORTAL_ROLLUP_COMPACT_INTERVAL", 60)
# Seconds between two evaluations of the threshold alert rules (error rate, latency, run duration, quota).
PORTAL_ALERTS_INTERVAL = envint("PORTAL_ALERTS_INTERVAL", 60)
# Networks that URLs typed by users (alert webhooks, knowledge bases' LLM endpoints) may reach although they are not
# public (10.x, 192.168.x, 127.x, 169.254.x, fc00::/7…), comma-separated CIDRs: an in-house chat server or LLM on
# the office network, say. Empty: public addresses only. See portal/lib/outbound.py.
OUTBOUND_ALLOWED_NETWORKS = envlist("OUTBOUND_ALLOWED_NETWORKS", "")
# Outgoing mail (alert channels of kind email): Django's settings, from the environment. The console backend by
# default prints messages to the worker's log; set EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend and
# EMAIL_HOST… for real mail.
EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD")  # or EMAIL_HOST_PASSWORD_FILE
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "portal@localhost")
CELERY_BEAT_SCHEDULE = {
    # Tasks that committed writes queued while the broker was down (apps/outbox): sent once it is back.
    "drain-outbox": {"task": "apps.outbox.tasks.drain", "schedule": 5.0},
    "purge-expired-tokens": {"task": "apps.accounts.tasks.purge_expired_tokens", "schedule": 24 * 3600},
    # Level-triggered repair: runs whose events were lost, dead agents, due retries.
    "reconcile-runs": {"task": "apps.jobs.tasks.reconcile", "schedule": 10.0},
    "tick-schedules": {"task": "apps.jobs.tasks.tick_schedules", "schedule": 15.0},
    # The overview's roll-ups: the deltas the triggers append folded into the summaries (one compactor at a time).
    "compact-slot-rollups": {
        "task": "apps.jobs.tasks.compact_rollups",
        "schedule": float(PORTAL_ROLLUP_COMPACT_INTERVAL),
        "options": {"expires": float(PORTAL_ROLLUP_COMPACT_INTERVAL)},
    },
    # Hyperparameter studies: intermediate values to the pruner, ended trials told, free slots filled, deadlines.
    "advance-studies": {"task": "apps.hpo.tasks.advance_studies", "schedule": float(PORTAL_HPO_INTERVAL)},
    # Threshold alert rules: fire what holds, resolve what cleared (apps/alerts/engine.py).
    "evaluate-alert-rules": {
        "task": "apps.alerts.tasks.evaluate_rules",
        "schedule": float(PORTAL_ALERTS_INTERVAL),
        "options": {"expires": float(PORTAL_ALERTS_INTERVAL)},
    },
    # Idle notebooks are stopped (with a warning first); notebooks whose events were lost are repaired.
    "cull-notebooks": {"task": "apps.notebooks.tasks.cull_notebooks", "schedule": float(PORTAL_NOTEBOOK_CULL_INTERVAL)},
    # Inference services: replica counts follow the measured load; lost events and dead replicas are repaired.
    "autoscale-services": {
        "task": "apps.serving.tasks.autoscale",
        "schedule": float(PORTAL_SERVING_AUTOSCALE_INTERVAL),
    },
    "reconcile-services": {
        "task": "apps.serving.tasks.reconcile",
        "schedule": float(PORTAL_SERVING_RECONCILE_INTERVAL),
    },
    # Kubernetes clusters' nodes and requests, for the queue's capacity (a message nobody took in time is dropped:
    # the next one replaces it); applies and deletes that should have happened by now, queued again.
    "refresh-cluster-inventories": {
        "task": "apps.runtime.tasks.kube_refresh_inventories",
        "schedule": globals()["PORTAL_KUBE_INVENTORY"],
        "options": {"expires": globals()["PORTAL_KUBE_INVENTORY"]},
    },
    # Labeling projects' progress read back from Label Studio: repairs webhooks that never arrived.
    "reconcile-labeling": {"task": "apps.labeling.tasks.reconcile", "schedule": 60.0, "options": {"expires": 60.0}},
    "repair-kube-workloads": {"task": "apps.runtime.tasks.kube_repair", "schedule": 60.0, "options": {"expires": 60.0}},
}
