# Habits for people used to make: each target bootstraps what it needs and calls
# the same invoke tasks and nox sessions that CI uses.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV   ?= .venv
PYTHON ?= python3
TARGET ?= standard
BIN     = $(VENV)/bin

.PHONY: help build lock test lint docs services docker push release clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/shipyard: pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null \
	  || { echo "installing python3-venv (needs root)"; apt-get update -qq && apt-get install -y -qq python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,remote]'
	@touch $@

BASE = .shipyard/base/python-3.11/index.json

$(BASE): # the Python base image, built from Debian packages with mmdebstrap (cached)
	bash scripts/services.sh --base

build: $(BIN)/shipyard $(BASE) ## build the TARGET group (default: standard) into dist/
	$(BIN)/invoke build --target=$(TARGET)

lock: $(BIN)/shipyard ## optional: write uv.lock so builds install its versions (not committed)
	$(BIN)/uv lock

test: services $(BIN)/shipyard ## start services, then run lint, typecheck, unit, integration
	SHIPYARD_REQUIRE_SERVICES=$${SHIPYARD_REQUIRE_SERVICES:-1} $(BIN)/nox -s test

docker: $(BIN)/shipyard $(BASE) ## build the TARGET group's images (dist/images/)
	$(BIN)/invoke build --target=$(TARGET) --output=image

push: $(BIN)/shipyard ## push the TARGET group's built images to every hub
	$(BIN)/invoke push --target=$(TARGET)

release: $(BIN)/shipyard ## release VERSION (make release VERSION=1.4.0)
	$(BIN)/invoke release --version=$(VERSION)

lint: $(BIN)/shipyard ## ruff check and format check
	$(BIN)/nox -s lint

docs: $(BIN)/shipyard ## the documentation site, references generated, strict -> dist/site/
	$(BIN)/nox -s docs

services: ## install and start dockerd, the registry, binfmt and the base image (root)
	bash scripts/services.sh

clean: ## remove dist/ and test environments
	rm -rf dist .nox
