# The two commands of the README live here.
#   make demo   set up .venv, replay the bundled real trace against the embedded engine,
#               render the report under reports/
#   make test   set up .venv, run ruff, mypy and the test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint lab clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: setup
	$(PY) -m workbench demo -o reports

lint: setup
	$(PY) -m ruff check workbench tests bench
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -q -m "not real_engine"

lab: setup
	$(PY) -m pip install --quiet -e '.[test,notebook]'
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf $(VENV) build *.egg-info
