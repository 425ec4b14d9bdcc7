# Shared by scripts/llama_cpp.sh and scripts/vllm_cpu.sh (sourced, not run): run a long
# set-up step with its output in a log file, and say where it is every few seconds.
#
#   with_progress LABEL LOG SUMMARY -- COMMAND [ARG...]
#
# Runs COMMAND with stdout and stderr to LOG. While it runs, every $PROGRESS_INTERVAL
# seconds (default 10) it prints "[tag] LABEL: <SUMMARY LOG> (N s)" to stderr when the
# summary changed or a minute passed since the last line; SUMMARY is a function that reads
# the log and prints one short line (e.g. the build's percentage). When COMMAND fails, the
# log's last 30 lines follow. Returns COMMAND's status. The sourcing script defines log.

PROGRESS_INTERVAL="${PROGRESS_INTERVAL:-10}"

cmake_percent() {  # the last "[ 42%]" of a CMake build log, and what it was doing
  local line
  line="$(grep -E '^\[ *[0-9]+%\]' "$1" 2>/dev/null | tail -n 1 || true)"
  if [[ -z "$line" ]]; then echo "starting"; return 0; fi
  local pct="${line%%\]*}"; pct="${pct#\[}"; pct="${pct// /}"
  local what="${line#*\] }"; what="${what##*/}"
  echo "$pct (${what:0:60})"
}

pip_count() {  # pip's progress through a requirements file: packages collected, installing
  local total="${PIP_TOTAL:-?}" n
  n="$(grep -cE '^(Collecting|Processing|Obtaining|Requirement already satisfied)' "$1" \
    2>/dev/null || true)"
  if grep -q '^Installing collected packages' "$1" 2>/dev/null; then
    echo "installing $total packages (collected ${n:-0})"
  else
    echo "collected ${n:-0} of $total packages"
  fi
}

with_progress() {
  local label="$1" logfile="$2" summary="$3"
  shift 3
  [[ "${1:-}" == "--" ]] && shift
  local t0=$SECONDS last="" last_t=$SECONDS checked=$SECONDS now
  "$@" >"$logfile" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do  # polled every second: the end is seen at once
    sleep 1
    (( SECONDS - checked >= PROGRESS_INTERVAL )) || continue
    checked=$SECONDS
    now="$("$summary" "$logfile")"
    if [[ "$now" != "$last" || $((SECONDS - last_t)) -ge 60 ]]; then
      log "$label: $now ($((SECONDS - t0)) s)"
      last="$now"; last_t=$SECONDS
    fi
  done
  local rc=0
  wait "$pid" || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 30 "$logfile" >&2
    log "$label failed (exit $rc) after $((SECONDS - t0)) s; log: $logfile"
  else
    log "$label: done in $((SECONDS - t0)) s ($("$summary" "$logfile"))"
  fi
  return $rc
}
