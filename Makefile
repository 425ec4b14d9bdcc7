# The two commands of the README live here.
#   make demo   set up .venv, replay a bundled public agent trace against the embedded
#               engine, render the report under reports/ (reports/demo/report.html)
#   make test   set up .venv, a real vLLM (CPU build) and llama.cpp's llama-server (built
#               from source), both outside the repo, then run ruff, mypy and the whole
#               test suite, real-engine tests included (what .ci/run calls); the fast part
#               on two pytest workers, the real engines after it in one process
# Extra:
#   make test-fast   the same without the real engines (no vLLM/llama.cpp set-up)
#   make lab         JupyterLab on notebooks/
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint vllm llama lab browser clean

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
	$(VENV)/bin/lint-imports

vllm:
	scripts/vllm_cpu.sh setup

llama: setup
	LLAMA_CPP_PYTHON=$(abspath $(PY)) scripts/llama_cpp.sh setup

# the browser tests drive JupyterLab with Debian's chromium (installed here, as root, when
# missing) through Playwright's Python client (extra [browser]; never `playwright install`)
browser: setup
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	  else echo "install chromium and chromium-driver (apt-get, as root)"; exit 1; fi; }
	$(PY) -m pip install --quiet -e '.[test,browser]'

# two pytest workers, one test file per worker (module fixtures such as the Ray cluster
# start once); most tests wait on a server or a subprocess, so two overlap well on 2 cores.
# The real-engine tests run after, in one process: one vLLM at a time fits this machine.
XDIST := -n 2 --dist loadfile

test: lint vllm llama browser
	$(PY) -m pytest -q $(XDIST) --ignore=tests/real_engine
	WORKBENCH_REAL_ENGINE=1 WORKBENCH_LLAMA_CPP=1 $(PY) -m pytest -q tests/real_engine

test-fast: lint
	$(PY) -m pytest -q -m "not real_engine and not browser" $(XDIST)

lab: setup
	$(PY) -m pip install --quiet -e '.[test,notebook]'
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/

clean:
	rm -rf $(VENV) build *.egg-info
