# syntax=docker/dockerfile:1
# The portal's image. One image runs every process: web (the default command), the Celery worker and beat,
# the Kubernetes controller (`python manage.py runkube`), migrations, and the built-in task templates on a
# cluster (`python -m apps.jobs.builtin_tasks.<name>`). k8s/ deploys it; README "Deploying to Kubernetes".
# The `train` target adds the training task environment (requirements-train.txt: torch, ONNX, SHAP, FLAML, PySpark)
# and a Java 17 runtime for Spark: task pods of templates whose command runs "{python:train}" use it
# (PORTAL_TRAIN_IMAGE, docs/kubernetes.md "Task images").
#
#   docker build -t registry.example.com/mlops-portal:0.1.0 .
#   docker build --target train -t registry.example.com/mlops-portal:0.1.0-train .
#
# Debian 12 named, not implied: the slim tag's Debian release moves, and psycopg/Pillow wheels with it.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE} AS portal

# PYTHONPATH: task pods start in their output folder, and `python -m apps.jobs…` must still find the code.
# HOME: the user has none, and libraries that cache under ~ (joblib, the MLflow client) need a writable one;
# /tmp is the scratch volume in every pod of k8s/.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/app \
    HOME=/tmp \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PORTAL_VAR_DIR=/var/lib/portal \
    PORTAL_STATIC_ROOT=/app/staticfiles \
    PORTAL_STATIC_FINDERS=false

# A fixed numeric uid/gid: Kubernetes' runAsNonRoot can only verify a numeric USER, and the manifests in k8s/
# run as 10001 with fsGroup 10001 so that the shared volumes are writable.
RUN groupadd --system --gid 10001 portal \
 && useradd --system --uid 10001 --gid portal --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin portal

WORKDIR /app

# Requirements first: a code change rebuilds only the layers below this one.
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

# The code stays owned by root: the portal's user can read it, not change it.
COPY . .
RUN python -m compileall -q apps portal

# Static files collected at build time into /app/staticfiles (outside the data volume, which would hide them).
# The key exists only for this command (settings refuse to start without one) and REDIS_URL keeps settings
# from laying out the embedded broker's folders in the image.
RUN mkdir -p "$PORTAL_VAR_DIR" \
 && SECRET_KEY=build-only-collectstatic-key REDIS_URL=redis://build.invalid:6379/0 \
        python manage.py collectstatic --noinput -v 0 \
 && chown 10001:10001 "$PORTAL_VAR_DIR"

# Everything the portal writes lives here (embedded SQLite, uploads, media, task outputs); on Kubernetes the
# `portal-data` and `portal-work` claims are mounted over it.
VOLUME ["/var/lib/portal"]

USER 10001:10001
EXPOSE 8000
CMD ["uvicorn", "portal.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--no-server-header", "--no-proxy-headers"]

# The training image: the portal's, plus the "train" task environment installed into the same interpreter (a task
# pod's "{python:train}" is the image's python, apps/runtime/kubernetes/manifests/pod.py) and Debian 12's Java 17 JRE
# for PySpark's JVM. Only the task pods of training templates run it; the portal's own processes never do.
FROM portal AS train
USER root
# The man folder: the slim image has none, and the JRE's post-install registers its man page there.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && java -version
COPY requirements-train.txt ./
RUN pip install --no-cache-dir -r requirements-train.txt
USER 10001:10001

# The last stage is what a plain `docker build .` makes: the portal's image.
FROM portal
