# Two commands for a newcomer: `make run` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: run test test-smoke lint install dev-install migrate demo vendor messages clean help

help:
	@echo "make run    - install, migrate, load the demo and start web + worker + beat on http://127.0.0.1:$(PORT)"
	@echo "make test   - run the whole test suite"
	@echo "make lint   - ruff"
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

# Without SECRET_KEY, settings read this key, generated once (DEBUG stays off).
var/secret_key:
	@mkdir -p var
	@umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

migrate: install var/secret_key
	$(PY) manage.py migrate --noinput
	@if [ -z "$$REDIS_URL" ]; then $(PY) manage.py migrate --noinput --database channels; fi

demo: migrate
	$(PY) manage.py demo

run: demo
	$(PY) manage.py collectstatic --noinput -v 0
	@echo ""
	@echo "  Portal: http://127.0.0.1:$(PORT)/   (API docs: http://127.0.0.1:$(PORT)/api/v1/docs/)"
	@echo ""
	PORTAL_PORT=$(PORT) exec $(VENV)/bin/honcho -f Procfile start

test: dev-install var/secret_key
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-smoke: dev-install var/secret_key
	$(VENV)/bin/pytest -m smoke $(PYTEST_ARGS)

lint: dev-install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Front-end packages come from npm (versions in package.json/package-lock.json) and are committed
# into static/vendor with their licences, so running the portal never needs Node.
vendor:
	npm ci --ignore-scripts --no-audit --no-fund
	rm -rf static/vendor && mkdir -p static/vendor/bootstrap static/vendor/bootstrap-icons static/vendor/htmx
	cp node_modules/bootstrap/dist/css/bootstrap.min.css node_modules/bootstrap/dist/css/bootstrap.min.css.map \
	   node_modules/bootstrap/dist/js/bootstrap.bundle.min.js node_modules/bootstrap/dist/js/bootstrap.bundle.min.js.map \
	   node_modules/bootstrap/LICENSE static/vendor/bootstrap/
	cp -r node_modules/bootstrap-icons/font/bootstrap-icons.min.css node_modules/bootstrap-icons/font/fonts \
	   node_modules/bootstrap-icons/LICENSE static/vendor/bootstrap-icons/
	cp node_modules/htmx.org/dist/htmx.min.js node_modules/htmx.org/LICENSE static/vendor/htmx/

messages:
	$(PY) manage.py makemessages -l zh_Hans --ignore '.venv/*' --ignore 'node_modules/*'
	$(PY) manage.py compilemessages --ignore '.venv/*'

clean:
	rm -rf var/staticfiles var/celery .pytest_cache
