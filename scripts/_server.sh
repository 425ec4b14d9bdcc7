# Shared by scripts/vllm_cpu.sh and scripts/llama_cpp.sh (sourced, not run): the
# state file, liveness and readiness checks, stop, status and url of one local
# server started with setsid (the pid is its process-group leader).
#
# The sourcing script sets: STATE (state file), HEALTH_PATH (GET path answering
# 200 when ready), HELPER_PY (an interpreter for the small helpers), and defines
# log, die and setup_status (one line saying whether it is set up).

state_field() {  # state_field KEY -> value from the state file (empty if absent)
  [[ -f "$STATE" ]] || return 0
  "$HELPER_PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' \
    "$STATE" "$1" 2>/dev/null || true
}

answers() {  # answers URL -> 0 if GET URL$HEALTH_PATH returns 200 within 3 s
  "$HELPER_PY" - "$1$HEALTH_PATH" <<'PY' 2>/dev/null
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

free_port() {
  "$HELPER_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

stop_server() {  # stop_server GRACE_S: TERM the process group, KILL after GRACE_S seconds
  local grace="$1" pid; pid="$(state_field pid)"
  if ! alive "$pid"; then
    rm -f "$STATE"
    log "no server running (${NAME})"
    return 0
  fi
  log "stopping pid $pid"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 $((grace * 2))); do
    alive "$pid" || break
    sleep 0.5
  done
  if alive "$pid"; then
    log "still alive after $grace s; SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE"
  log "stopped"
}

cmd_status() {
  setup_status
  [[ -f "$STATE" ]] || { log "no server state ($STATE)"; return 1; }
  cat "$STATE"; echo
  local pid url; pid="$(state_field pid)"; url="$(state_field url)"
  if alive "$pid" && answers "$url"; then log "running: $url"; return 0; fi
  log "not answering (pid $pid)"; return 1
}

cmd_url() {
  local pid url; pid="$(state_field pid)"; url="$(state_field url)"
  alive "$pid" && answers "$url" || return 1
  echo "$url"
}

wait_ready() {  # wait_ready PID URL POLL_S: returns once URL answers (READY_S = seconds taken);
  # dies, stopping PID's group, if the server exits or START_TIMEOUT passes first
  local pid="$1" url="$2" poll="$3" t0=$SECONDS
  while (( SECONDS - t0 < START_TIMEOUT )); do
    if ! alive "$pid"; then
      tail -n 30 "$LOG" >&2 || true
      die "server exited during start-up (log: $LOG)"
    fi
    if answers "$url"; then
      READY_S=$((SECONDS - t0))
      return 0
    fi
    sleep "$poll"
  done
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  tail -n 30 "$LOG" >&2 || true
  die "server not ready after $START_TIMEOUT s (log: $LOG)"
}

write_state() {  # write_state URL PID PORT [KEY=INT ...] -- ARGS...: the state file of a ready server
  "$HELPER_PY" - "$STATE" "$LOG" "$MODEL_NAME" "$READY_S" "$@" <<'PY'
import json, sys
path, log, model, ready, url, pid, port, *rest = sys.argv[1:]
cut = rest.index("--")
state = {"url": url, "pid": int(pid), "port": int(port), "log": log, "model": model,
         "start_seconds": int(ready)}
state.update((k, int(v)) for k, v in (kv.split("=", 1) for kv in rest[:cut]))
state["args"] = rest[cut + 1 :]
json.dump(state, open(path, "w"), indent=1)
PY
  log "ready in $READY_S s: $1 (pid $2)"
}
