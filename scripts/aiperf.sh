#!/usr/bin/env bash
# Install NVIDIA AIPerf (PyPI) in a venv of its own and replay Weka traces with it, offline,
# for the parity check against workbench (docs/aiperf-parity.md, tests/parity).
#
#   scripts/aiperf.sh setup        idempotent: venv + pinned aiperf + the offline tokenizer dir
#   scripts/aiperf.sh weka URL INPUT OUT [-- ARGS]
#                                  replay the Weka trace file or folder INPUT against the
#                                  OpenAI-compatible server at URL with the parity flags
#                                  below; artifacts (profile_export.jsonl ...) under OUT;
#                                  ARGS are appended (a later flag wins)
#   scripts/aiperf.sh bin          print the aiperf executable's path (exit 1 if not set up)
#   scripts/aiperf.sh tokenizer    print the tokenizer directory (exit 1 if not set up)
#   scripts/aiperf.sh env          print the settings below
#
# Everything lives outside the repository, under $AIPERF_HOME
# (default: $HOME/.cache/workbench/aiperf):
#   venv/             aiperf $AIPERF_VERSION and its dependencies (transformers, tokenizers ...)
#   char-tokenizer/   a Hugging Face tokenizer directory written here by
#                     scripts/make_char_tokenizer.py: one token per non-space character, decoded
#                     with a space between tokens, so the embedded engine (which counts words)
#                     sees exactly the tokens AIPerf built. Nothing is downloaded for it.
#   .workbench-stamp  hash of the version, set-up revision, interpreter and tokenizer writer
#
# Settings (environment):
#   AIPERF_HOME      where everything lives (see above)
#   AIPERF_PYTHON    interpreter for the venv (default python3.11, else python3; aiperf
#                    needs >= 3.10)
#
# The parity flags of `weka` (why: docs/aiperf-parity.md):
#   --endpoint-type chat --streaming     what workbench's chat protocol sends
#   --custom-dataset-type weka_trace     the Weka loader, on a file or a folder
#   --ignore-trace-delays --no-fixed-schedule
#                                        no recorded waits: a run takes seconds; requests go
#                                        out as soon as their dependencies allow
#                                        (--ignore-trace-delays is left out when ARGS has
#                                        --use-think-time-only, --inter-turn-delay-cap-seconds
#                                        or --fixed-schedule)
#   --concurrency N --num-sessions N     N = the root traces in INPUT: every root session
#                                        runs once, all at the same time
#   --use-server-token-count             token counts from the server's usage block
#   --tokenizer <char-tokenizer>         the offline tokenizer above
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOKENIZER_WRITER="$HERE/make_char_tokenizer.py"
AIPERF_VERSION="0.13.0"
SETUP_REV="1"   # bump when the set-up steps change

HOME_DIR="${AIPERF_HOME:-${HOME}/.cache/workbench/aiperf}"
VENV="$HOME_DIR/venv"
TOKENIZER="$HOME_DIR/char-tokenizer"
STAMP="$HOME_DIR/.workbench-stamp"
PYTHON="${AIPERF_PYTHON:-$(command -v python3.11 || command -v python3)}"

log() { echo "[aiperf] $*" >&2; }
die() { echo "[aiperf] error: $*" >&2; exit 1; }

stamp_value() {
  { echo "aiperf=$AIPERF_VERSION rev=$SETUP_REV"; cat "$TOKENIZER_WRITER"
    "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}

installed_ok() {
  [[ -x "$VENV/bin/aiperf" && -f "$TOKENIZER/tokenizer.json" ]] || return 1
  "$VENV/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('aiperf') != '$AIPERF_VERSION')" 2>/dev/null
}

is_set_up() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_value)" ]] && installed_ok; }

cmd_setup() {
  if is_set_up; then
    log "already set up: aiperf $AIPERF_VERSION in $VENV, tokenizer $TOKENIZER"
    return 0
  fi
  [[ -n "$PYTHON" ]] || die "no python3.11/python3 on PATH (set AIPERF_PYTHON)"
  mkdir -p "$HOME_DIR"
  rm -f "$STAMP"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
  fi
  log "installing aiperf==$AIPERF_VERSION (PyPI)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "aiperf==$AIPERF_VERSION"
  log "writing the offline tokenizer to $TOKENIZER"
  rm -rf "$TOKENIZER"
  HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
    "$VENV/bin/python" "$TOKENIZER_WRITER" "$TOKENIZER" >&2
  installed_ok || die "set-up finished but aiperf $AIPERF_VERSION does not import"
  stamp_value >"$STAMP"
  log "set up: $VENV/bin/aiperf, $TOKENIZER"
}

need_setup() { is_set_up || die "not set up; run: $0 setup"; }

count_roots() {
  # root traces in a file (1) or a folder (its *.json files)
  if [[ -d "$1" ]]; then
    find "$1" -maxdepth 1 -name '*.json' | wc -l
  else
    echo 1
  fi
}

cmd_weka() {
  [[ $# -ge 3 ]] || die "usage: $0 weka URL INPUT OUT [-- ARGS]"
  local url="$1" input="$2" out="$3"; shift 3
  [[ "${1:-}" == "--" ]] && shift
  need_setup
  local n; n="$(count_roots "$input")"
  [[ "$n" -ge 1 ]] || die "no *.json trace in $input"
  local model
  model="$("$VENV/bin/python" -c "import json, sys, urllib.request; \
print(json.load(urllib.request.urlopen(sys.argv[1] + '/v1/models', timeout=10))['data'][0]['id'])" \
    "$url")" || die "no model list at $url/v1/models"
  # recorded waits asked for (ARGS): leave --ignore-trace-delays out, they exclude each other
  local delays=(--ignore-trace-delays) a
  for a in "$@"; do
    case "$a" in
      --use-think-time-only|--inter-turn-delay-cap-seconds*|--fixed-schedule) delays=() ;;
    esac
  done
  mkdir -p "$out/mmap"
  # The tokenizer is an absolute local directory, which AIPerf loads without asking the Hub.
  # HF_HUB_OFFLINE must stay unset: with it AIPerf 0.13.0 looks every tokenizer name up in the
  # HF cache as a repo id, local directories included, and fails ("Repo id must be in the
  # form 'repo_name'").
  # AIPerf's dataset files under OUT (not one aiperf_mmap_* folder in /tmp per run, left
  # behind), and no cross-run dataset cache in ~/.cache/aiperf (keyed by the input bytes)
  AIPERF_DATASET_MMAP_BASE_PATH="${AIPERF_DATASET_MMAP_BASE_PATH:-$out/mmap}" \
  AIPERF_DATASET_MMAP_CACHE_ENABLED="${AIPERF_DATASET_MMAP_CACHE_ENABLED:-false}" \
  TRANSFORMERS_VERBOSITY=error exec "$VENV/bin/aiperf" profile \
    --model "$model" --url "$url" --endpoint-type chat --streaming \
    --tokenizer "$TOKENIZER" --use-server-token-count \
    --custom-dataset-type weka_trace --input-file "$input" \
    "${delays[@]}" --no-fixed-schedule --concurrency "$n" --num-sessions "$n" \
    --artifact-dir "$out" --ui-type none "$@"
}

cmd_env() {
  cat <<EOF
AIPERF_HOME=$HOME_DIR
AIPERF_PYTHON=$PYTHON
AIPERF_VERSION=$AIPERF_VERSION
venv=$VENV
tokenizer=$TOKENIZER
set_up=$(is_set_up && echo yes || echo no)
EOF
}

case "${1:-}" in
  setup) cmd_setup ;;
  weka) shift; cmd_weka "$@" ;;
  bin) need_setup; echo "$VENV/bin/aiperf" ;;
  tokenizer) need_setup; echo "$TOKENIZER" ;;
  env) cmd_env ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
