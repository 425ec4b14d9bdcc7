#!/usr/bin/env bash
# Build and run llama.cpp's `llama-server` on the CPU with a tiny random-weight Llama GGUF.
#
#   scripts/llama_cpp.sh setup            idempotent: sdist download, cmake build, tiny GGUF
#   scripts/llama_cpp.sh start [-- ARGS]  start llama-server on 127.0.0.1:<free port>, wait until
#                                         GET /health answers 200, write the state file
#   scripts/llama_cpp.sh serve [-- ARGS]  llama-server in the foreground on $LLAMA_CPP_PORT (8080;
#                                         a later --port in ARGS wins), for sweep --serve
#   scripts/llama_cpp.sh stop             SIGTERM the server's process group (SIGKILL after 10 s)
#   scripts/llama_cpp.sh status           print the state file; exit 0 only if the server answers
#   scripts/llama_cpp.sh url              print the running server's base URL (exit 1 if none)
#   scripts/llama_cpp.sh env              print the settings below
#
# Everything lives outside the repository, under $LLAMA_CPP_HOME
# (default: $HOME/.cache/workbench/llama-cpp):
#   src/           the llama-cpp-python sdist (PyPI) and its unpacked tree; only its vendored
#                  llama.cpp (vendor/llama.cpp, with tools/server) is built
#   build/         the CMake build; build/bin/llama-server + its shared libs (found via RPATH)
#   tiny-llama.gguf  2-layer Llama, random f16 weights (scripts/make_tiny_gguf.py), 36 MB
#   .workbench-stamp  hash of the version, flags and GGUF writer; a matching stamp skips set-up
#   <name>.json    state file of a running server: url, pid, port, log, flags
#   <name>.log     its output
#
# Settings (environment):
#   LLAMA_CPP_HOME           where everything lives (see above)
#   LLAMA_CPP_PYTHON         interpreter with pip and the `gguf` package (default: the repo's
#                            .venv/bin/python; `pip install -e '.[test]'` brings gguf)
#   LLAMA_CPP_JOBS           parallel compile jobs (default: nproc)
#   LLAMA_CPP_NAME           server instance name, for state/log files (default: server)
#   LLAMA_CPP_PORT           port (default: a free one)
#   LLAMA_CPP_CTX            context size, -c (default 8192)
#   LLAMA_CPP_PARALLEL       slots, -np (default 1: the KV cache is per slot)
#   LLAMA_CPP_THREADS        threads, -t (default 1)
#   LLAMA_CPP_CACHE_RAM      --cache-ram MiB of the host-memory prompt cache (default: the
#                            server's, 8192; 0 turns it off so only the slot's own KV is reused)
#   LLAMA_CPP_START_TIMEOUT  seconds to wait for readiness (default 60)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
GGUF_WRITER="$HERE/make_tiny_gguf.py"
LCP_VERSION="0.3.36"   # llama-cpp-python sdist that vendors the llama.cpp we build
SETUP_REV="1"          # bump when the set-up steps change
CMAKE_FLAGS=(
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release
)

HOME_DIR="${LLAMA_CPP_HOME:-${HOME}/.cache/workbench/llama-cpp}"
SRC_ROOT="$HOME_DIR/src"
SDIST="$SRC_ROOT/llama_cpp_python-$LCP_VERSION.tar.gz"
SRC="$SRC_ROOT/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
BUILD="$HOME_DIR/build"
BIN="$BUILD/bin/llama-server"
MODEL="$HOME_DIR/tiny-llama.gguf"
STAMP="$HOME_DIR/.workbench-stamp"
NAME="${LLAMA_CPP_NAME:-server}"
STATE="$HOME_DIR/$NAME.json"
LOG="$HOME_DIR/$NAME.log"
if [[ -n "${LLAMA_CPP_PYTHON:-}" ]]; then PYTHON="$LLAMA_CPP_PYTHON"
elif [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"
else PYTHON="$(command -v python3.11 || command -v python3)"; fi
JOBS="${LLAMA_CPP_JOBS:-$(nproc)}"
CTX="${LLAMA_CPP_CTX:-8192}"
PARALLEL="${LLAMA_CPP_PARALLEL:-1}"
THREADS="${LLAMA_CPP_THREADS:-1}"
CACHE_RAM="${LLAMA_CPP_CACHE_RAM:-}"
START_TIMEOUT="${LLAMA_CPP_START_TIMEOUT:-60}"
MODEL_NAME="tiny-llama"

log() { echo "[llama_cpp] $*" >&2; }
die() { echo "[llama_cpp] error: $*" >&2; exit 1; }

HEALTH_PATH="/health"  # GET answering 200 once the server is ready
HELPER_PY="python3"
# shellcheck source=scripts/_server.sh
source "$(dirname "${BASH_SOURCE[0]}")/_server.sh"
# shellcheck source=scripts/_progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/_progress.sh"

stamp_value() {
  { echo "llama-cpp-python=$LCP_VERSION rev=$SETUP_REV"; echo "${CMAKE_FLAGS[*]}"; cat "$GGUF_WRITER"; } \
    | sha256sum | cut -d' ' -f1
}

binary_ok() { [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; }

fetch_sources() {
  if [[ -f "$SRC/CMakeLists.txt" && -d "$SRC/tools/server" ]]; then return 0; fi
  mkdir -p "$SRC_ROOT"
  if [[ ! -f "$SDIST" ]]; then
    log "downloading the llama-cpp-python $LCP_VERSION sdist (77 MB)"
    "$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
      "llama-cpp-python==$LCP_VERSION" -d "$SRC_ROOT" 2> >(grep -v "is ignored: it is neither" >&2)
    [[ -f "$SDIST" ]] || die "pip download did not produce $SDIST"
  fi
  log "unpacking $SDIST"
  rm -rf "$SRC_ROOT/llama_cpp_python-$LCP_VERSION"
  tar -xzf "$SDIST" -C "$SRC_ROOT"
  [[ -f "$SRC/CMakeLists.txt" && -d "$SRC/tools/server" ]] \
    || die "the sdist has no vendor/llama.cpp/tools/server"
}

build_server() {
  command -v cmake >/dev/null || die "cmake not found (apt-get install cmake g++)"
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    log "configuring (cmake ${CMAKE_FLAGS[*]})"
    cmake -S "$SRC" -B "$BUILD" "${CMAKE_FLAGS[@]}" >"$HOME_DIR/configure.log" 2>&1 \
      || { tail -n 30 "$HOME_DIR/configure.log" >&2; die "cmake configure failed"; }
  fi
  log "building llama-server with -j$JOBS (cold: 7-25 min on 2 cores; log: $HOME_DIR/build.log)"
  with_progress "building llama-server" "$HOME_DIR/build.log" cmake_percent -- \
    cmake --build "$BUILD" --target llama-server -j"$JOBS" || die "build failed"
  binary_ok || die "$BIN does not run"
}

write_model() {
  "$PYTHON" -c 'import gguf' 2>/dev/null \
    || die "$PYTHON has no gguf package: pip install -e '.[test]' (or set LLAMA_CPP_PYTHON)"
  "$PYTHON" "$GGUF_WRITER" "$MODEL" >/dev/null
}

cmd_setup() {
  mkdir -p "$HOME_DIR"
  local want; want="$(stamp_value)"
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -f "$MODEL" ]] && binary_ok; then
    log "already set up: $BIN"
    return 0
  fi
  local t0=$SECONDS
  rm -f "$STAMP"
  fetch_sources
  build_server
  log "writing $MODEL"
  write_model
  echo "$want" >"$STAMP"
  log "set up in $((SECONDS - t0)) s: $BIN"
}

cmd_start() {
  [[ "${1:-}" == "--" ]] && shift
  [[ -f "$STAMP" && -f "$MODEL" ]] && binary_ok || die "not set up; run: $0 setup"
  local old_pid old_url
  old_pid="$(state_field pid)"; old_url="$(state_field url)"
  if alive "$old_pid" && answers "$old_url"; then
    log "already running: $old_url (pid $old_pid)"
    echo "$old_url"
    return 0
  fi
  alive "$old_pid" && { log "stale server pid $old_pid does not answer; stopping it"; cmd_stop; }
  rm -f "$STATE"
  local port="${LLAMA_CPP_PORT:-$(free_port)}"
  local url="http://127.0.0.1:$port"
  build_flags "$port" "$@"
  log "starting llama-server on $url (log: $LOG)"
  ( exec_server setsid >"$LOG" 2>&1 ) &
  local pid=$!
  wait_ready "$pid" "$url" 0.5
  write_state "$url" "$pid" "$port" ctx="$CTX" parallel="$PARALLEL" -- "${flags[@]}"
  echo "$url"
}

setup_status() {
  if [[ -f "$STAMP" ]] && binary_ok; then log "set up: $BIN"; else log "not set up ($HOME_DIR)"; fi
}

build_flags() {
  # the server's flags on port $1, then the caller's: into the global array `flags`
  local port="$1"; shift
  flags=(
    -m "$MODEL" --alias "$MODEL_NAME" --host 127.0.0.1 --port "$port"
    -c "$CTX" -np "$PARALLEL" -t "$THREADS" --metrics --slots --no-webui
  )
  [[ -n "$CACHE_RAM" ]] && flags+=(--cache-ram "$CACHE_RAM")
  flags+=("$@")
}

exec_server() {
  # replace this (sub)shell with llama-server "${flags[@]}"; $1: a prefix command (setsid) or ""
  # LLAMA_ARG_* variables would silently override the flags above.
  while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^LLAMA_ARG_' || true)
  exec ${1:+"$1"} "$BIN" "${flags[@]}" </dev/null
}

cmd_serve() {
  # llama-server in the foreground on LLAMA_CPP_PORT (8080; a later --port in ARGS wins),
  # output to stdout/stderr: for a supervisor that owns its process group (sweep --serve)
  [[ "${1:-}" == "--" ]] && shift
  [[ -f "$STAMP" && -f "$MODEL" ]] && binary_ok || die "not set up; run: $0 setup"
  build_flags "${LLAMA_CPP_PORT:-8080}" "$@"
  exec_server ""
}

cmd_stop() { stop_server 10; }

cmd_env() {
  cat <<TXT
LLAMA_CPP_HOME=$HOME_DIR
SRC=$SRC
BIN=$BIN
MODEL=$MODEL
STATE=$STATE
LOG=$LOG
PYTHON=$PYTHON
JOBS=$JOBS
CTX=$CTX
PARALLEL=$PARALLEL
THREADS=$THREADS
CACHE_RAM=${CACHE_RAM:-<server default>}
TXT
}

case "${1:-}" in
  setup) shift; cmd_setup "$@" ;;
  start) shift; cmd_start "$@" ;;
  serve) shift; cmd_serve "$@" ;;
  stop) shift; cmd_stop ;;
  status) shift; cmd_status ;;
  url) shift; cmd_url ;;
  env) shift; cmd_env ;;
  *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
