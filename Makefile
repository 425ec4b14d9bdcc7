# The two commands of the README live here.
#   make demo   set up .venv, replay a bundled public agent trace against the embedded
#               engine, render the report under reports/ (reports/demo/report.html)
#   make test   set up .venv, a real vLLM (CPU build), llama.cpp's llama-server (built
#               from source) and AIPerf (PyPI, for tests/parity), all outside the repo,
#               then run ruff, mypy and the whole test suite, real-engine and AIPerf
#               parity tests included (what .ci/run calls); the fast part
#               on two pytest workers, the real engines after it in one process; then the
#               fast suite on each of $(PYTHONS) (3.13), each in its own .venv-X.Y.
#               Every phase prints its time when it ends ("[time] ...", scripts/timed.sh)
# Extra:
#   make test-fast   the same without the real engines and AIPerf (no vLLM/llama.cpp/AIPerf set-up)
#   make test-pythons  only the fast suite on $(PYTHONS) (make test-py3.13: one of them)
#   make wheel       python -m build: the sdist and the wheel under dist/
#   make lab         JupyterLab on notebooks/
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the other Pythons make test runs the fast suite on (scripts/find_python.sh finds them on
# PATH or under pyenv); `PYTHONS=` leaves them out. The newest only: with 3.11 in .venv
# that brackets the supported range, and a third pass of the suite (15 min on a slow
# host) put CI past an hour; `make test-py3.12` (or PYTHONS="3.12 3.13") runs 3.12
PYTHONS ?= 3.13
TIMED := scripts/timed.sh

.PHONY: setup demo test test-fast test-pythons lint vllm llama aiperf lab browser wheel clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py workbench/sim/kvcache.c workbench/sim/decoders.c workbench/kernels.c
	$(TIMED) "set-up of $(VENV)" sh -c "$(PYTHON) -m venv $(VENV) && \
	  $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -e '.[test]'"
	touch $(STAMP)

# from a clone (above: editable, in .venv); from a wheel instead:
#   python -m build --wheel && pip install dist/workbench_replay-*.whl && workbench demo -o reports
demo: setup
	$(PY) -m workbench demo -o reports

lint: setup
	$(TIMED) lint sh -c "$(PY) -m ruff check workbench tests bench && $(PY) -m mypy && \
	  $(VENV)/bin/lint-imports"

vllm:
	$(TIMED) "vLLM set-up" scripts/vllm_cpu.sh setup

llama: setup
	LLAMA_CPP_PYTHON=$(abspath $(PY)) $(TIMED) "llama.cpp set-up" scripts/llama_cpp.sh setup

# AIPerf in a venv of its own, with an offline tokenizer, for the parity tests (tests/parity)
aiperf:
	$(TIMED) "AIPerf set-up" scripts/aiperf.sh setup

wheel: setup
	$(PY) -m build --outdir dist .

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

FAST := -m "not real_engine and not browser and not aiperf"

test: lint vllm llama browser aiperf
	WORKBENCH_AIPERF=1 $(TIMED) "whole suite without the real engines" \
	  $(PY) -m pytest -q $(XDIST) --ignore=tests/real_engine
	WORKBENCH_REAL_ENGINE=1 WORKBENCH_LLAMA_CPP=1 $(TIMED) "real-engine tests" \
	  $(PY) -m pytest -q tests/real_engine
	$(MAKE) --no-print-directory test-pythons

test-fast: lint
	$(TIMED) "fast suite" $(PY) -m pytest -q $(FAST) $(XDIST)

# the fast suite on another Python, in its own venv (.venv-3.13 for test-py3.13)
test-pythons: $(addprefix test-py,$(PYTHONS))

test-py%: $(VENV)-%/.installed
	$(TIMED) "fast suite on Python $*" $(VENV)-$*/bin/python -m pytest -q $(FAST) $(XDIST)

.PRECIOUS: $(VENV)-%/.installed
$(VENV)-%/.installed: pyproject.toml setup.py workbench/sim/kvcache.c workbench/sim/decoders.c workbench/kernels.c
	py="$$(scripts/find_python.sh $*)" && $(TIMED) "set-up of $(VENV)-$* ($$py)" sh -c \
	  "$$py -m venv $(VENV)-$* && $(VENV)-$*/bin/python -m pip install --quiet --upgrade pip && \
	  $(VENV)-$*/bin/python -m pip install --quiet -e '.[test]'"
	touch $@

lab: setup
	$(PY) -m pip install --quiet -e '.[test,notebook]'
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/

clean:
	rm -rf $(VENV) $(VENV)-* build dist *.egg-info
